package chainwal_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/internal/backendstest"
)

func TestMain(m *testing.M) {
	var opts []goleak.Option
	for _, f := range backendstest.GoroutinesToIgnore {
		opts = append(opts, goleak.IgnoreTopFunction(f))
	}
	goleak.VerifyTestMain(m, opts...)
}
