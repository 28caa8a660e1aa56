package e2e

import (
	"os"

	"go.uber.org/zap/zapcore"
)

func zapErrorLevel() zapcore.Level {
	if os.Getenv("FLEET_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}
