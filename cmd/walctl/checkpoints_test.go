package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/backendstest"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/security/authz"
)

// consumersHarness is a harness whose nodes keep consumers' checkpoints,
// in chain mode on a memory backend, chains and checkpoints in the
// cluster's meta store where walnode keeps them.
type consumersHarness struct {
	*harness
	b      *backendstest.Backends
	chains *chain.Store
	store  *consumers.Store
}

func newConsumersHarness(t *testing.T) *consumersHarness {
	h := newHarness(t)
	kv, err := etcdstore.New(h.cli, etcdstore.Options{Prefix: metaPrefix(h.layout.Root)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	store, err := consumers.NewStore(kv, consumers.Options{})
	require.NoError(t, err)
	return &consumersHarness{harness: h, b: backendstest.Start(t, "memory"), chains: chain.NewStore(kv, chain.Options{}), store: store}
}

// startNode starts a node whose retainer runs a round right after each
// commit and every 50 ms; the returned func stops it (also at cleanup).
func (h *consumersHarness) startNode(id string) func() {
	t := h.t
	entries := chainread.LookupFunc(h.b.Lookup)
	d, err := entries.Describe("memory")
	require.NoError(t, err)
	n, err := node.New(h.cli, h.b.Entry("memory"), node.Config{ID: id, Root: h.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory",
		Chains:    &chainwal.Config{Store: h.chains, Openers: entries, Default: d, Describe: entries.Describe},
		Consumers: h.store, Retention: retention.Config{Interval: 50 * time.Millisecond, CommitDelay: time.Millisecond}})
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

// checkpointsJSON runs walctl checkpoints -json.
func (h *consumersHarness) checkpointsJSON(channel string) checkpointsView {
	t := h.t
	t.Helper()
	r := h.walctl("checkpoints", channel, "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var v checkpointsView
	require.NoError(t, json.Unmarshal([]byte(r.out), &v), "%s", r)
	return v
}

// beyondCheckpoint is a checkpoint of the same form as cp, far after it.
func beyondCheckpoint(t *testing.T, cp string) string {
	var tt uint64
	var pos string
	_, err := fmt.Sscanf(cp, "%d@%s", &tt, &pos)
	require.NoError(t, err)
	return fmt.Sprintf("%d@%s", tt+1<<30, pos)
}

// commit, checkpoints (and -drop), channels -v and explain against nodes
// that keep checkpoints: a commit is stored or refused with its reason,
// the owner truncates at the slowest consumer and says so, a dropped
// consumer no longer holds the log, and without the owner the checkpoints
// come from the meta store.
func TestCheckpoints(t *testing.T) {
	h := newConsumersHarness(t)
	stop := h.startNode("n1")
	h.startNode("n2")
	h.assign("c0", "n1", 1)
	h.waitFor("c0 open", func(s cluster.Snapshot) bool { return s.Opened["c0"].Value.Term == 1 })

	r := h.walctl("append", "c0", "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = h.walctl("tail", "c0", "-until-caught-up", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var cps []string
	for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var d struct {
			Checkpoint string `json:"checkpoint"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &d))
		cps = append(cps, d.Checkpoint)
	}
	require.Len(t, cps, 10)

	r = h.walctl("checkpoints", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Equal(t, "no consumer has committed on c0\n", r.out[:strings.Index(r.out, "retention:")])
	r = h.walctl("checkpoints", "nosuch")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, `unknown channel "nosuch"`)

	// Commits: stored, or refused with the reason.
	// The flusher first: a consumer that commits after another may find
	// the log truncated at that one's checkpoint already.
	r = h.walctl("commit", "c0", "flusher", cps[3], "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var committed struct {
		Channel string `json:"channel"`
		consumerView
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &committed), "%s", r)
	require.Equal(t, "c0", committed.Channel)
	require.Equal(t, "flusher", committed.Consumer)
	require.Equal(t, cps[3], committed.Checkpoint)
	require.EqualValues(t, 1, committed.Term)
	r = h.walctl("commit", "c0", "indexer", cps[6])
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "consumer indexer of c0: committed "+cps[6]+" (term 1, at ")
	require.Contains(t, r.out, "resumes after "+cps[6])
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"commit", "c0", "indexer", cps[2]}, "commit refused (backwards): " + cps[2] + " is before the stored checkpoint of consumer indexer: a stale consumer; stored: " + cps[6] + " (term 1, committed "},
		{[]string{"commit", "c0", "indexer", beyondCheckpoint(t, cps[9])}, "commit refused (beyond): "},
		{[]string{"commit", "c0", "indexer", "garbage"}, "commit refused (invalid): checkpoint"},
		{[]string{"commit", "nosuch", "indexer", cps[9]}, `unknown channel "nosuch"`},
	} {
		r = h.walctl(tc.args...)
		require.Equal(t, exitFailed, r.code, "%s", r)
		require.Contains(t, r.errOut, tc.err, "%q", tc.args)
		require.Empty(t, r.out, "%q: nothing reported as done", tc.args)
	}

	// The owner truncates at the slowest, and says who holds the log.
	var v checkpointsView
	require.Eventually(t, func() bool {
		v = h.checkpointsJSON("c0")
		return v.Retention != nil && v.Retention.TruncatedTo == cps[3]
	}, testTimeout, 10*time.Millisecond)
	require.Equal(t, "owner", v.Source)
	require.Equal(t, "n1", v.Owner)
	require.Equal(t, "consumer flusher", v.Retention.HeldBy)
	require.Len(t, v.Consumers, 2)
	for _, cp := range v.Consumers {
		require.NotNil(t, cp.Holding)
		require.Equal(t, cp.Consumer == "flusher", *cp.Holding, cp.Consumer)
	}
	r = h.walctl("checkpoints", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl checkpoints c0:\n%s", r.out)
	require.Regexp(t, `(?m)^CONSUMER +VCHANNEL +CHECKPOINT +COMMITTED +RESUME +TERM +HOLDING$`, r.out)
	require.Regexp(t, `(?m)^flusher +- +`+cps[3]+` +\S+ ago +`+cps[3]+` +1 +yes$`, r.out)
	require.Regexp(t, `(?m)^indexer +- +`+cps[6]+` +\S+ ago +`+cps[6]+` +1 +-$`, r.out)
	require.Contains(t, r.out, "held by consumer flusher, truncated to "+cps[3]+"; measured ")
	require.Contains(t, r.out, "segments:  0 memory/c0 (written): ")

	r = h.walctl("commit", "c0", "late", cps[1])
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "commit refused (truncated): "+cps[1]+" is before where the log is truncated ("+cps[3]+"): what it names is gone; the consumer resumes from the first message kept")

	// channels -v and explain show the same.
	r = h.walctl("channels", "-v")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl channels -v:\n%s", r.out)
	require.Contains(t, r.out, "RETAINED")
	require.Regexp(t, `(?m)^c0 .* B, \d+ msg +\S+ +consumer flusher$`, r.out)
	r = h.walctl("channels", "-v", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, `"held_by":"consumer flusher"`)
	r = h.walctl("explain", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl explain c0:\n%s", r.out)
	require.Contains(t, r.out, "chain:")
	require.Contains(t, r.out, "writes on memory/c0 (segment 0 of 1 kept)")
	require.Regexp(t, `retained: +\d+ B in \d+ message\(s\), oldest \S+ \(\S+ ago\), held by consumer flusher, truncated to `+cps[3], r.out)
	require.Regexp(t, `consumers: +flusher at `+cps[3]+`, committed \S+ ago \(term 1\), holding the log\n +indexer at `+cps[6], r.out, "the slowest first")
	r = h.walctl("explain", "c0", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var x explanation
	require.NoError(t, json.Unmarshal([]byte(r.out), &x))
	require.Equal(t, "memory", x.Backend)
	require.NotNil(t, x.Retention)
	require.Equal(t, cps[3], x.Retention.TruncatedTo)
	require.Len(t, x.Consumers, 2)
	require.Equal(t, "flusher", x.Consumers[0].Consumer)

	// A consumer that is gone is dropped: the log is then held by the
	// other one.
	r = h.walctl("checkpoints", "c0", "-drop", "flusher")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "dropped consumer flusher of c0")
	require.Eventually(t, func() bool {
		v = h.checkpointsJSON("c0")
		return v.Retention != nil && v.Retention.TruncatedTo == cps[6]
	}, testTimeout, 10*time.Millisecond)
	require.Len(t, v.Consumers, 1)
	require.Equal(t, "consumer indexer", v.Retention.HeldBy)
	r = h.walctl("checkpoints", "c0", "-drop", "flusher")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, `channel "c0" has no consumer flusher (walctl checkpoints c0 lists its consumers)`)
	r = h.walctl("checkpoints", "c0", "-drop", "indexer", "-vchannel", "v1")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "has no consumer indexer of vchannel v1")

	// Without the owner, the checkpoints as stored.
	stop()
	h.waitFor("n1 gone", func(s cluster.Snapshot) bool { _, ok := s.Nodes["n1"]; return !ok })
	r = h.walctl("checkpoints", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.errOut, "walctl: the owner did not answer (n1 is not live: its lease is gone): the checkpoints as the meta store holds them")
	require.Regexp(t, `(?m)^indexer +- +`+cps[6]+` .* \?$`, r.out)
	require.Contains(t, r.out, "retention: unknown (the owner did not answer); truncated to "+cps[6])
	v = h.checkpointsJSON("c0")
	require.Equal(t, "store", v.Source)
	require.Equal(t, cps[6], v.TruncatedTo)
	r = h.walctl("explain", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "retained:")
	require.Contains(t, r.out, "unknown: the owner did not say")
	require.Contains(t, r.out, "indexer at "+cps[6])
}

// commit's and checkpoints' command lines.
func TestCheckpointsCommandLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, tc := range []struct {
		args []string
		code int
		out  string
		err  string
	}{
		{[]string{"commit", "c0", "x"}, exitUsage, "", "wants <channel> <consumer> <checkpoint>, got 2"},
		{[]string{"commit", "c0", "x", "1@s0/1", "extra"}, exitUsage, "", "got 4"},
		{[]string{"checkpoints"}, exitUsage, "", "wants <channel>, got 0"},
		{[]string{"checkpoints", "c0", "-vchannel", "v"}, exitUsage, "", "-vchannel goes with -drop <consumer>"},
		{[]string{"checkpoints", "c0", "-drop"}, exitUsage, "", "flag needs an argument: -drop"},
		{[]string{"help", "commit"}, exitOK, "usage: walctl commit [flags] <channel> <consumer> <checkpoint>", ""},
		{[]string{"checkpoints", "-h"}, exitOK, "-drop consumer", ""},
		{[]string{"help"}, exitOK, "checkpoints <channel>", ""},
	} {
		var out, errOut bytes.Buffer
		code := run(ctx, tc.args, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
		r := result{code: code, out: out.String(), errOut: errOut.String()}
		require.Equal(t, tc.code, r.code, "walctl %q:\n%s", tc.args, r)
		require.Contains(t, r.out, tc.out, "walctl %q", tc.args)
		require.Contains(t, r.errOut, tc.err, "walctl %q", tc.args)
	}
}

// How retention figures print.
func TestRetentionText(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		require.Equal(t, want, byteSize(n), "%d", n)
	}
	r := &retentionView{Bytes: 2048, Messages: 3, HeldBy: "retention"}
	require.Equal(t, "", r.dropped(), "no policy, nothing dropped")
	require.Equal(t, "2.0 KiB, 3 msg\t-\tretention", retentionColumns(r))
	require.Equal(t, "-\t-\t-", retentionColumns(nil))
	r.MaxAgeMS, r.MaxBytes = (24 * time.Hour).Milliseconds(), 1<<30
	require.Equal(t, "nothing (policy: max age 24h0m0s, max bytes 1.0 GiB)", r.dropped())
	r.Dropped = &droppedView{Messages: 12, Bytes: 4096}
	require.Equal(t, "12 message(s), 4.0 KiB (policy: max age 24h0m0s, max bytes 1.0 GiB)", r.dropped())
	r.HeldBy = ""
	require.Equal(t, "2.0 KiB in 3 message(s), held by nothing (truncated up to its tail)", r.summary())
}

// With etcd's authentication on and the roles of walctl etcd-roles, a
// viewer (streamwal-reader) lists a channel's checkpoints from the meta
// store but cannot drop a consumer; an operator (streamwal-admin) can.
func TestCheckpointsDropNeedsAdmin(t *testing.T) {
	es := etcdtest.Start(t) // authentication is server-wide: a server of its own
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	root := etcdtest.Client(t, es.Endpoints())
	passwords := map[string]string{}
	for _, user := range []string{"root", "operator", "viewer"} {
		passwords[user] = user + "-password"
		_, err := root.UserAdd(ctx, user, passwords[user])
		require.NoError(t, err)
	}
	_, err := root.UserGrantRole(ctx, "root", "root")
	require.NoError(t, err)
	h := newHarnessOn(t, root, es.Endpoints(), "")
	r := h.walctl("etcd-roles")
	require.Equal(t, exitOK, r.code, "%s", r)
	for user, role := range map[string]string{"operator": authz.EtcdRoleAdmin, "viewer": authz.EtcdRoleReader} {
		_, err := root.UserGrantRole(ctx, user, role)
		require.NoError(t, err)
	}

	// A consumer's checkpoint, as an owner would have stored it.
	kv, err := etcdstore.New(root, etcdstore.Options{Prefix: metaPrefix(h.layout.Root)})
	require.NoError(t, err)
	defer func() { _ = kv.Close() }()
	store, err := consumers.NewStore(kv, consumers.Options{})
	require.NoError(t, err)
	parse := func(s string) (cursor.Checkpoint, error) {
		tt, id, _ := strings.Cut(s, "@")
		n, err := strconv.ParseUint(tt, 10, 64)
		if err != nil {
			return cursor.Checkpoint{}, err
		}
		pos, err := message.UnmarshalSeqID("memory", id)
		return cursor.Checkpoint{Position: pos, TimeTick: n}, err
	}
	_, err = store.Commit(ctx, "c0", consumers.Scope{Consumer: "old"}, cursor.Checkpoint{Position: message.NewSeqID("memory", 5), TimeTick: 10}, 1, parse)
	require.NoError(t, err)
	h.view.Close()
	_, err = root.AuthEnable(ctx)
	require.NoError(t, err)

	as := func(user string, args ...string) result {
		return h.walctl(append(args, "-etcd-user", user, "-etcd-password-file", secretFile(t, passwords[user]))...)
	}
	r = as("viewer", "checkpoints", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Regexp(t, `(?m)^old +- +10@`, r.out)
	require.Contains(t, r.out, "retention: unknown (the channel has no owner); never truncated")
	r = as("viewer", "checkpoints", "c0", "-drop", "old")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "permission denied")
	r = as("operator", "checkpoints", "c0", "-drop", "old")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = as("viewer", "checkpoints", "c0")
	require.Equal(t, exitFailed, r.code, "nothing left of c0: %s", r)
	require.Contains(t, r.errOut, `unknown channel "c0"`)
}
