package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
)

// walctlUntil runs walctl like walctl, and stops it as Ctrl-C would once
// stop, given walctl's context, returns (it runs beside walctl) and
// migrate has written all its requests.
func (h *harness) walctlUntil(stop func(ctx context.Context), args ...string) result {
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	requested := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop(ctx)
		select {
		case <-requested:
		case <-ctx.Done():
		}
		cancel()
	}()
	var out, errOut bytes.Buffer
	args = append(args, "-etcd", strings.Join(h.endpoints, ","), "-root", h.layout.Root)
	var once sync.Once
	code := run(ctx, args, env{in: strings.NewReader(""), out: &out, errOut: &errOut,
		requested: func() { once.Do(func() { close(requested) }) }})
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

	// Another operator's request of c0 to pulsar: c0 is refused, c1's
	// request is withdrawn, the other operator's stays.
	_, err = coordinator.RequestMigrate(h.ctx, h.cli, h.layout, "c0", "pulsar", "ops")
	require.NoError(t, err)
	r := h.walctlUntil(func(ctx context.Context) {
		_, _ = h.view.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Migrations) == 2 })
	}, "migrate", "-all", "kafka")
	require.Equal(t, exitFailed, r.code, "%s", r)
	t.Logf("walctl migrate -all kafka:\n%s", r)
	require.Contains(t, r.errOut, "1 migration(s) refused:\n  c0: coordinator: migrate c0 to kafka: a migration to pulsar is requested already")
	require.Contains(t, r.errOut, "1 of 1 migration(s) not done (context canceled); taken back: none takes effect:\n  c1: its request withdrawn")
	require.Equal(t, []string{"c0"}, h.requests())
	s, _ := h.view.Snapshot()
	require.Equal(t, "pulsar", s.Migrations["c0"].Value.To)
}

// A migrate whose coordinator recorded the intent and assigned the
// channel at the migration's term, to an owner that never opens it (a
// node registered whose process does nothing): walctl gives up and
// cancels the intent before its seal (exit 1, the chain stays as it was);
// when the owner sealed it already (and did not serve it yet), it cannot
// be taken back: PENDING, with the command that undoes it (exit 3).
func TestMigrateGiveUpAfterIntent(t *testing.T) {
	h := newChainHarness(t, "memory", "memory", "local")
	stop := h.startNode("n1")
	h.startCoordinator("c0", "c1")
	h.waitFor("c0 and c1 open", func(s cluster.Snapshot) bool {
		return s.Opened["c0"].Value.Term == 1 && s.Opened["c1"].Value.Term == 1
	})
	// ghost is live (its lease, no address to probe) and opens nothing.
	lease, err := h.cli.Grant(h.ctx, 60)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = h.cli.Revoke(context.Background(), lease.ID) })
	_, err = h.cli.Put(h.ctx, h.layout.Node("ghost"), string(cluster.Encode(cluster.NodeInfo{ID: "ghost", Started: time.Now()})), clientv3.WithLease(lease.ID))
	require.NoError(t, err)
	stop()
	h.waitFor("c0 and c1 on ghost at term 2", func(s cluster.Snapshot) bool {
		return s.Assignments["c0"].Value.Node == "ghost" && s.Assignments["c1"].Value.Term == 2 && s.Assignments["c1"].Value.Node == "ghost"
	})
	// started: the intent is recorded and the channel assigned at its term.
	started := func(ctx context.Context, ch string) bool {
		_, err := h.view.WaitFor(ctx, func(s cluster.Snapshot) bool { return s.Migrations[ch].Value.Term != 0 })
		return err == nil
	}

	// Cancelled before its seal.
	var ok bool
	r := h.walctlUntil(func(ctx context.Context) { ok = started(ctx, "c0") }, "migrate", "c0", "local", "-wait")
	require.True(t, ok, "the migration started:\n%s", r)
	require.Equal(t, exitFailed, r.code, "%s", r)
	t.Logf("walctl migrate c0 local -wait, cancelled:\n%s", r)
	require.Contains(t, r.errOut, "c0: the migration to local at term 3 cancelled before its seal: it stays on memory/c0")
	require.NotContains(t, r.errOut, "PENDING")
	c, err := h.store.Get(h.ctx, "c0")
	require.NoError(t, err)
	require.Nil(t, c.Pending, "the intent is cancelled")
	require.Len(t, c.Segments, 1)
	require.Empty(t, h.requests())

	// Sealed already (by the owner, which then hangs): pending.
	r = h.walctlUntil(func(ctx context.Context) {
		if !started(ctx, "c1") {
			return
		}
		c, err := h.store.Get(ctx, "c1")
		require.NoError(t, err)
		require.NotNil(t, c.Pending)
		_, err = h.store.Seal(ctx, "c1", chain.SealRequest{Segment: 0, Term: c.Pending.Term})
		require.NoError(t, err)
	}, "migrate", "c1", "local", "-wait")
	require.Equal(t, exitPending, r.code, "%s", r)
	t.Logf("walctl migrate c1 local -wait, sealed:\n%s", r)
	require.Contains(t, r.errOut, "1 pending, not taken back: it may still take effect, or did")
	require.Contains(t, r.errOut, "PENDING c1: sealed already: it writes on local/c1-s1 (segment 1) from term 3 (not served yet: ghost is opening it at term 3 since")
	require.Contains(t, r.errOut, "walctl migrate c1 memory undoes it")
	c, err = h.store.Get(h.ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, "local", c.Last().Backend.Name)
}
