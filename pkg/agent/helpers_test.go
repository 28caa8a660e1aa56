package agent

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

func typesUID(s string) types.UID { return types.UID(s) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

type typesUIDT = types.UID

var errResetBroken = errors.New("kubeadm reset: exit status 1")
