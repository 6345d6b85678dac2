package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
)

// walctlUntil runs walctl like walctl, and stops it as Ctrl-C would once
// stop, given walctl's context, returns (it runs beside walctl).
func (h *harness) walctlUntil(stop func(ctx context.Context), args ...string) result {
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop(ctx)
		cancel()
	}()
	var out, errOut bytes.Buffer
	args = append(args, "-etcd", strings.Join(h.endpoints, ","), "-root", h.layout.Root)
	code := run(ctx, args, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
	cancel()
	<-done
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// requests returns the migrate requests left in etcd.
func (h *harness) requests() []string {
	resp, err := h.cli.Get(h.ctx, h.layout.Migrations(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(h.t, err)
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), h.layout.Migrations()))
	}
	return keys
}

// waitChain waits until cond holds for channel's chain, watching its key
// in the meta store; false when ctx ends first.
func (h *chainHarness) waitChain(ctx context.Context, channel string, cond func(chain.Chain) bool) (chain.Chain, bool) {
	key := metaPrefix(h.layout.Root) + chain.Key(channel)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := h.cli.Get(wctx, key, clientv3.WithKeysOnly())
	if err != nil {
		return chain.Chain{}, false
	}
	check := func() (chain.Chain, bool) {
		c, err := h.store.Get(wctx, channel)
		return c, err == nil && cond(c)
	}
	if c, ok := check(); ok {
		return c, true
	}
	for wr := range h.cli.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if wr.Err() != nil {
			return chain.Chain{}, false
		}
		if c, ok := check(); ok {
			return c, true
		}
	}
	return chain.Chain{}, false
}

// A migrate that gives up before any coordinator acted on its requests
// (the one registered is stopped: its election key is there, it does
// nothing) withdraws them: exit 1, and no request is left for a
// coordinator to carry out later. -all withdraws each channel's.
func TestMigrateGiveUpWithdraws(t *testing.T) {
	h := newHarness(t)
	h.startNode("n1")
	for _, ch := range []string{"c0", "c1"} {
		h.assign(ch, "n1", 1)
	}
	h.waitFor("c0 and c1 open", func(s cluster.Snapshot) bool {
		return s.Opened["c0"].Value.Term == 1 && s.Opened["c1"].Value.Term == 1
	})
	_, err := h.cli.Put(h.ctx, h.layout.Election()+"/694d7c1a2b3c4d5e", "stopped coordinator")
	require.NoError(t, err)

	for _, tc := range []struct {
		args []string
		n    int
	}{
		{[]string{"migrate", "c0", "kafka"}, 1},
		{[]string{"migrate", "-all", "kafka"}, 2},
		{[]string{"migrate", "-all", "kafka", "-json"}, 2},
	} {
		requested := false
		r := h.walctlUntil(func(ctx context.Context) {
			_, err := h.view.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Migrations) == tc.n })
			requested = err == nil
		}, tc.args...)
		require.True(t, requested, "%q wrote its requests:\n%s", tc.args, r)
		require.Equal(t, exitFailed, r.code, "%q:\n%s", tc.args, r)
		require.Empty(t, h.requests(), "%q: every request withdrawn", tc.args)
		if strings.Contains(strings.Join(tc.args, " "), "-json") {
			require.Equal(t, tc.n, strings.Count(r.out, `"result":"withdrawn"`), "%s", r)
		} else {
			// Cancelled while it waited, or while it set out to.
			require.Regexp(t, `migration\(s\) not done \(.*context canceled\); taken back: none takes effect`, r.errOut)
			require.Equal(t, tc.n, strings.Count(r.errOut, "its request withdrawn before the coordinator acted on it: nothing changes"), "%s", r)
		}
		require.NotContains(t, r.errOut, "PENDING")
		t.Logf("walctl %s:\n%s", strings.Join(tc.args, " "), r)
	}
}

// A migrate whose coordinator recorded the intent, but whose channel's
// only node died (nobody opens it at the migration's term): walctl gives
// up and cancels the intent before its seal (exit 1, the chain stays as
// it was); when an owner sealed it already before dying, it cannot be
// taken back: PENDING, with the command that undoes it (exit 3).
func TestMigrateGiveUpAfterIntent(t *testing.T) {
	h := newChainHarness(t, "memory", "memory", "local")
	stop := h.startNode("n1")
	h.startCoordinator("c0", "c1")
	h.waitFor("c0 and c1 open", func(s cluster.Snapshot) bool {
		return s.Opened["c0"].Value.Term == 1 && s.Opened["c1"].Value.Term == 1
	})
	stop()
	h.waitFor("n1 gone", func(s cluster.Snapshot) bool { _, ok := s.Nodes["n1"]; return !ok })

	// Cancelled before its seal.
	var pending *chain.Migration
	r := h.walctlUntil(func(ctx context.Context) {
		if c, ok := h.waitChain(ctx, "c0", func(c chain.Chain) bool { return c.Pending != nil }); ok {
			pending = c.Pending
		}
	}, "migrate", "c0", "local", "-wait")
	require.NotNil(t, pending, "the coordinator recorded the intent:\n%s", r)
	require.Equal(t, exitFailed, r.code, "%s", r)
	t.Logf("walctl migrate c0 local -wait, cancelled:\n%s", r)
	require.Contains(t, r.errOut, "the migration to local at term 2 cancelled before its seal: it stays on memory/c0")
	require.NotContains(t, r.errOut, "PENDING")
	c, err := h.store.Get(h.ctx, "c0")
	require.NoError(t, err)
	require.Nil(t, c.Pending, "the intent is cancelled")
	require.Len(t, c.Segments, 1)
	require.Empty(t, h.requests())

	// Sealed already (by an owner that opened at the migration's term and
	// died before it served): pending.
	r = h.walctlUntil(func(ctx context.Context) {
		c, ok := h.waitChain(ctx, "c1", func(c chain.Chain) bool { return c.Pending != nil })
		if !ok {
			return
		}
		_, err := h.store.Seal(ctx, "c1", chain.SealRequest{Segment: 0, Term: c.Pending.Term})
		require.NoError(t, err)
	}, "migrate", "c1", "local", "-wait")
	require.Equal(t, exitPending, r.code, "%s", r)
	t.Logf("walctl migrate c1 local -wait, sealed:\n%s", r)
	require.Contains(t, r.errOut, "1 pending, not taken back: it may still take effect, or did")
	require.Contains(t, r.errOut, "PENDING c1:")
	require.Contains(t, r.errOut, "sealed already: it writes on local/c1-s1 (segment 1) from term 2 (not served yet: its owner n1 is not live)")
	require.Contains(t, r.errOut, "walctl migrate c1 memory undoes it")
	c, err = h.store.Get(h.ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, "local", c.Last().Backend.Name)
}
