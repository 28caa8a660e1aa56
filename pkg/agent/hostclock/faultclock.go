//go:build faultclock

package hostclock

import (
	"fmt"
	"os"
	"time"
)

func init() {
	v := os.Getenv(OffsetEnv)
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet-agent: %s=%q: %v\n", OffsetEnv, v, err)
		os.Exit(2)
	}
	offset = d
}
