package chainread_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// TestLookupFunc: an entry resolves only under the kind it has, and
// Describe says what a chain records of it; an unknown name or another
// kind is ErrNoOpener, never another entry's opener.
func TestLookupFunc(t *testing.T) {
	o, err := memory.New(context.Background(), memory.Config{Cluster: memory.NewCluster()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	table := map[string]walimpls.Opener{"mem": o}
	f := chainread.LookupFunc(func(name string) (string, walimpls.Opener, bool) {
		got, ok := table[name]
		return memory.Name, got, ok
	})

	got, err := f.Opener(chain.Backend{Name: "mem", Kind: memory.Name, Channel: "c"})
	require.NoError(t, err)
	require.Same(t, o, got)
	_, err = f.Opener(chain.Backend{Name: "mem", Kind: "local", Channel: "c"})
	require.ErrorIs(t, err, chainread.ErrNoOpener, "an entry of another kind than the chain recorded")
	_, err = f.Opener(chain.Backend{Name: "disk", Kind: memory.Name, Channel: "c"})
	require.ErrorIs(t, err, chainread.ErrNoOpener)

	d, err := f.Describe("mem")
	require.NoError(t, err)
	require.Equal(t, chain.Backend{Name: "mem", Kind: memory.Name}, d)
	_, err = f.Describe("disk")
	require.ErrorIs(t, err, chainread.ErrNoOpener)
}
