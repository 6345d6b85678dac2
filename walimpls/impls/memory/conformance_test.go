package memory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor/adaptortest"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type cluster struct {
	c   *memory.Cluster
	cfg memory.Config
}

func (c cluster) NewOpener(t *testing.T) walimpls.Opener {
	cfg := c.cfg
	cfg.Cluster = c.c
	o, err := memory.New(context.Background(), cfg)
	require.NoError(t, err)
	return o
}

// implementsOptional declares memory's optional interfaces to the suite,
// which checks the declaration against the types.
var implementsOptional = walimplstest.Implements(walimplstest.BatchRead, walimplstest.AsyncAppend)

func TestConformance(t *testing.T) {
	walimplstest.Run(t, func(t *testing.T) walimplstest.Cluster {
		return cluster{c: memory.NewCluster()}
	}, implementsOptional)
}

// A size limit changes the suite's large-message and too-large paths: the
// parts that send messages at or above the limit run again under it.
func TestConformanceWithSizeLimit(t *testing.T) {
	walimplstest.Run(t, func(t *testing.T) walimplstest.Cluster {
		return cluster{c: memory.NewCluster(), cfg: memory.Config{MaxMessageBytes: 64 << 10}}
	}, implementsOptional, walimplstest.SizeLimitParts())
}

func TestAdaptor(t *testing.T) {
	adaptortest.Run(t, func(t *testing.T) walimplstest.Cluster {
		return cluster{c: memory.NewCluster()}
	})
}

// With backend fencing off, memory is a backend that cannot fence: the
// parts about opening, fencing and taking over run again and skip what it
// declares it cannot do (the adaptor's log-level fence alone protects
// readers: TestAdaptorNoFencing). Its appends and reads are the fenced
// cluster's.
func TestConformanceNoFencing(t *testing.T) {
	walimplstest.Run(t, func(t *testing.T) walimplstest.Cluster {
		c := memory.NewCluster()
		c.SetFencing(false)
		return cluster{c: c}
	}, implementsOptional, walimplstest.OpeningParts())
}

func TestAdaptorNoFencing(t *testing.T) {
	adaptortest.Run(t, func(t *testing.T) walimplstest.Cluster {
		c := memory.NewCluster()
		c.SetFencing(false)
		return cluster{c: c}
	})
}
