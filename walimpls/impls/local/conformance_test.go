package local

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor/adaptortest"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// cluster is one store; each NewOpener is another node sharing its journal.
type cluster struct{ s *Store }

func (c cluster) NewOpener(t *testing.T) walimpls.Opener { return c.s.NewOpener() }

func conformanceFactory(cfg Config) walimplstest.Factory {
	return func(t *testing.T) walimplstest.Cluster {
		cfg := cfg
		cfg.Dir = t.TempDir()
		s, err := New(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return cluster{s: s}
	}
}

// implementsOptional declares local's optional interfaces to the suite,
// which checks the declaration against the types.
var implementsOptional = walimplstest.Implements(walimplstest.BatchRead, walimplstest.AsyncAppend)

func TestConformance(t *testing.T) {
	walimplstest.Run(t, conformanceFactory(Config{SegmentBytes: 8 << 20, MaxMessageBytes: 2 << 20}), implementsOptional)
}

// Small segments make the suite's appends cross many segment switches.
func TestConformanceSmallSegments(t *testing.T) {
	walimplstest.Run(t, conformanceFactory(Config{SegmentBytes: 256 << 10, MaxMessageBytes: 64 << 10}), implementsOptional)
}

func TestConformanceSyncNone(t *testing.T) {
	walimplstest.Run(t, conformanceFactory(Config{SegmentBytes: 8 << 20, MaxMessageBytes: 2 << 20, Sync: SyncNone}), implementsOptional)
}

func TestAdaptor(t *testing.T) {
	adaptortest.Run(t, conformanceFactory(Config{SegmentBytes: 8 << 20, MaxMessageBytes: 2 << 20}))
}
