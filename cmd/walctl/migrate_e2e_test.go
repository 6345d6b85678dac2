package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
)

// chainHarness is a harness whose nodes run in chain mode over the
// backends b (new channels on def), chains in the cluster's meta store.
type chainHarness struct {
	*harness
	b     *backendstest.Backends
	store *chain.Store
	def   string
}

func newChainHarness(t *testing.T, def string, kinds ...string) *chainHarness {
	h := newHarness(t)
	kv, err := etcdstore.New(h.cli, etcdstore.Options{Prefix: metaPrefix(h.layout.Root)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	return &chainHarness{harness: h, b: backendstest.Start(t, kinds...), store: chain.NewStore(kv, chain.Options{}), def: def}
}

// startNode starts a node in chain mode; the returned func stops it (also
// at cleanup).
func (h *chainHarness) startNode(id string) func() {
	t := h.t
	entries := chainread.LookupFunc(h.b.Lookup)
	d, err := entries.Describe(h.def)
	require.NoError(t, err)
	n, err := node.New(h.cli, h.b.Entry(h.def), node.Config{ID: id, Root: h.layout.Root, SessionTTL: 2 * time.Second, Backend: h.def,
		Chains: &chainwal.Config{Store: h.store, Openers: entries, Default: d, Describe: entries.Describe}})
	require.NoError(t, err)
	require.NoError(t, n.Start(h.ctx))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
	}
	t.Cleanup(stop)
	return stop
}

// startCoordinator runs a coordinator with the chains, and waits until
// each channel is assigned and confirmed.
func (h *chainHarness) startCoordinator(channels ...string) {
	t := h.t
	co, err := coordinator.New(h.cli, coordinator.Config{ID: "coord", Root: h.layout.Root, SessionTTL: time.Second,
		ReconcileInterval: 100 * time.Millisecond, OpenTimeout: time.Hour, Channels: coordinator.StaticChannels(channels...),
		Chains: h.store, Describe: chainread.LookupFunc(h.b.Lookup).Describe, Backends: h.b.Names()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- co.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	h.waitFor("every channel assigned and open", func(s cluster.Snapshot) bool {
		for _, ch := range channels {
			if a, ok := s.Assignments[ch]; !ok || a.Value.State != cluster.Assigned {
				return false
			}
		}
		return true
	})
}

// End to end, with nodes in chain mode: migrate one channel and wait
// until it writes on its new segment, read across both, migrate every
// other channel, and the refusals.
func TestMigrateChains(t *testing.T) {
	h := newChainHarness(t, "memory", "memory", "local")
	h.startNode("n1")
	h.startNode("n2")
	h.startCoordinator("c0", "c1", "c2")
	owner := h.owner("c0")

	r := h.walctl("append", "c0", "before-1", "before-2")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = h.walctl("migrate", "c0", "local", "-dry-run")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Regexp(t, `c0 +memory/c0 +0 +local/c0-s1 +1 -> 2 +`+owner, r.out)
	r = h.walctl("migrate", "-all", "local", "-dry-run", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 3, "%s", r)
	var p planned
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &p))
	require.Equal(t, planned{Channel: "c2", Backend: "memory/c2", Segment: 0, To: "local", ToChannel: "c2-s1", Term: 1, NewTerm: 2,
		Owner: h.owner("c2"), NewOwner: h.owner("c2")}, p)
	require.Empty(t, h.requests(), "a dry run writes nothing")

	r = h.walctl("migrate", "c0", "local", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl migrate c0 local -wait:\n%s", r.out)
	require.Contains(t, r.out, "c0 migrates from memory/c0 to local at term 2 (owner "+owner+")")
	require.Contains(t, r.out, "1/1 migrated: c0 writes on local/c0-s1 (segment 1) at term 2 on "+owner)
	c, err := h.store.Get(h.ctx, "c0")
	require.NoError(t, err)
	require.Len(t, c.Segments, 2)
	require.Equal(t, "local", c.Last().Backend.Name)

	r = h.walctl("append", "c0", "after")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = h.walctl("tail", "c0", "-until-caught-up")
	require.Equal(t, exitOK, r.code, "%s", r)
	for _, p := range []string{"before-1", "before-2", "after"} {
		require.Contains(t, r.out, p, "read across both segments")
	}
	require.Less(t, strings.Index(r.out, "before-2"), strings.Index(r.out, "after"))

	r = h.walctl("channels", "-v")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl channels -v:\n%s", r.out)
	require.Contains(t, r.out, "local/c0-s1")
	require.Contains(t, r.out, "memory/c1")

	r = h.walctl("migrate", "c0", "local")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, `channel "c0" is on backend local already (segment 1, since term 2)`)
	// A backend the cluster does not know: refused before anything is
	// written, by a dry run too, naming the backends it knows.
	for _, args := range [][]string{{"migrate", "c1", "nosuch"}, {"migrate", "-dry-run", "c1", "nosuch"}, {"migrate", "-all", "-dry-run", "nosuch"}} {
		r = h.walctl(args...)
		require.Equal(t, exitFailed, r.code, "%q: %s", args, r)
		require.Equal(t, "walctl: unknown backend \"nosuch\": the cluster's backend entries are local, memory (the coordinator coord's configuration)\n", r.errOut, "%q", args)
		require.Empty(t, r.out, "%q: no plan", args)
	}
	require.Empty(t, h.requests())

	r = h.walctl("migrate", "-all", "local", "-wait", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl migrate -all local -wait -json:\n%s", r.out)
	require.Contains(t, r.out, `"result":"migrated"`)
	require.Contains(t, r.out, `"done":2,"of":2`)
	for _, ch := range []string{"c1", "c2"} {
		c, err := h.store.Get(h.ctx, ch)
		require.NoError(t, err)
		require.Equal(t, "local", c.Last().Backend.Name, ch)
	}
	r = h.walctl("migrate", "-all", "local")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Equal(t, "every channel is on local already\n", r.out)

	// And back: a new segment, on the first backend again.
	r = h.walctl("migrate", "c0", "memory", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "1/1 migrated: c0 writes on memory/c0-s2 (segment 2) at term 3")
}
