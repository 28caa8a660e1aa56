package create

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// ParseMaxUnhealthy reads a count ("2") or a percentage ("40%").
func ParseMaxUnhealthy(s string) (intstr.IntOrString, error) {
	bad := fmt.Errorf("--max-unhealthy %q: want a number of machines (2) or a percentage (40%%)", s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return intstr.IntOrString{}, bad
		}
		return intstr.FromString(s), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return intstr.IntOrString{}, bad
	}
	return intstr.FromInt32(int32(n)), nil
}

// validateTimeout refuses what a MachineHealthCheck cannot hold: a
// negative duration, or more seconds than an int32.
func validateTimeout(flag string, d time.Duration) error {
	if d < 0 || d.Seconds() > math.MaxInt32 {
		return fmt.Errorf("%s %s: want a duration ≥ 0 (0 turns the check off)", flag, d)
	}
	return nil
}
