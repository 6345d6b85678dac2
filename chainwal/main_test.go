package chainwal_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/internal/backendstest"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		os.Exit(crashChild(dir, os.Getenv(crashStepEnv)))
	}
	var opts []goleak.Option
	for _, f := range backendstest.GoroutinesToIgnore {
		opts = append(opts, goleak.IgnoreAnyFunction(f))
	}
	goleak.VerifyTestMain(m, opts...)
}
