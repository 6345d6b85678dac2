package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = etcdtest.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(etcdtest.Main(m, srv))
}

// testTimeout is every test's watchdog.
const testTimeout = 60 * time.Second

// harness is one test's cluster: nodes on a shared memory backend and, if
// asked, a coordinator managing some channels, under a root of its own.
type harness struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	layout cluster.Layout
	mem    *memory.Cluster
	view   *cluster.View
	// endpoints are etcd's; policy, if set, is every node's (auth_test.go).
	endpoints []string
	policy    *authz.Policy
}

func newHarness(t *testing.T) *harness {
	return newHarnessOn(t, etcdtest.Client(t, srv.Endpoints()), srv.Endpoints(), "")
}

// newHarnessOn is a harness whose nodes and coordinator use cli, a client
// of the etcd at endpoints, under root ("": one of the test's own).
func newHarnessOn(t *testing.T, cli *clientv3.Client, endpoints []string, root string) *harness {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	if root == "" {
		root = etcdtest.Prefix(t) + "cluster/"
	}
	l, err := cluster.NewLayout(root)
	require.NoError(t, err)
	v, err := cluster.Watch(ctx, cli, l, nil)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return &harness{t: t, ctx: ctx, cli: cli, layout: l, mem: memory.NewCluster(), view: v, endpoints: endpoints}
}

// startNode starts a node; the returned func stops it (also at cleanup).
func (h *harness) startNode(id string) func() {
	t := h.t
	o, err := memory.New(context.Background(), memory.Config{Cluster: h.mem})
	require.NoError(t, err)
	n, err := node.New(h.cli, o, node.Config{ID: id, Root: h.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory", Authz: h.policy})
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
		_ = o.Close()
	}
	t.Cleanup(stop)
	return stop
}

// startCoordinator runs a coordinator managing channels until the test
// ends, and waits until each is assigned and confirmed.
func (h *harness) startCoordinator(channels ...string) {
	t := h.t
	co, err := coordinator.New(h.cli, coordinator.Config{ID: "coord", Root: h.layout.Root, SessionTTL: time.Second,
		ReconcileInterval: 100 * time.Millisecond, OpenTimeout: time.Hour, Channels: coordinator.StaticChannels(channels...)})
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

func (h *harness) waitFor(what string, cond func(cluster.Snapshot) bool) cluster.Snapshot {
	h.t.Helper()
	s, err := h.view.WaitFor(h.ctx, cond)
	require.NoError(h.t, err, "waiting for %s", what)
	return s
}

// assign writes an assignment as a coordinator would (for a channel the
// test's coordinator does not manage).
func (h *harness) assign(channel, nodeID string, term int64) {
	a := cluster.Assignment{Channel: channel, Node: nodeID, Term: term, State: cluster.Assigning, Since: time.Now()}
	_, err := h.cli.Put(h.ctx, h.layout.Assignment(channel), string(cluster.Encode(a)))
	require.NoError(h.t, err)
}

func (h *harness) owner(channel string) string {
	s, _ := h.view.Snapshot()
	return s.Assignments[channel].Value.Node
}

// result is one walctl run.
type result struct {
	code        int
	out, errOut string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
}

// walctl runs walctl's command line in-process against the harness's
// cluster; the cluster's flags go last, after the command's arguments.
func (h *harness) walctl(args ...string) result {
	return h.walctlIn("", args...)
}

func (h *harness) walctlIn(stdin string, args ...string) result {
	var out, errOut bytes.Buffer
	args = append(args, "-etcd", strings.Join(h.endpoints, ","), "-root", h.layout.Root)
	code := run(h.ctx, args, env{in: strings.NewReader(stdin), out: &out, errOut: &errOut})
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// Command lines walctl cannot run: exit 2 with the usage; asking for help:
// exit 0 with it on stdout. No cluster is needed for either.
func TestCommandLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cases := []struct {
		args []string
		code int
		out  string // a part of stdout
		err  string // a part of stderr
	}{
		{nil, exitUsage, "", "no command"},
		{[]string{"-json"}, exitUsage, "", "no command"},
		{[]string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{[]string{"channels", "extra"}, exitUsage, "", "walctl channels: wants no arguments, got 1"},
		{[]string{"channels", "-bogus"}, exitUsage, "", "flag provided but not defined: -bogus"},
		{[]string{"-bogus", "channels"}, exitUsage, "", "flag provided but not defined: -bogus"},
		{[]string{"channels", "-wait"}, exitUsage, "", "flag provided but not defined: -wait"},
		{[]string{"move"}, exitUsage, "", "wants <channel> [<node>], got 0"},
		{[]string{"move", "a", "b", "c"}, exitUsage, "", "got 3"},
		{[]string{"drain"}, exitUsage, "", "usage: walctl drain"},
		{[]string{"tail", "ch", "-n", "-5"}, exitUsage, "", "-n -5: must be 0 or more"},
		{[]string{"tail", "ch", "-n", "0", "-from", "x"}, exitUsage, "", "contradict"},
		{[]string{"tail", "ch", "-n", "20000"}, exitUsage, "", "at most 10000"},
		{[]string{"nodes", "-timeout", "0s"}, exitUsage, "", "must be positive"},
		{[]string{"help", "frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{[]string{"help", "move", "drain"}, exitUsage, "", "at most one command"},

		{[]string{"help"}, exitOK, "usage: walctl [flags] <command>", ""},
		{[]string{"-h"}, exitOK, "usage: walctl [flags] <command>", ""},
		{[]string{"help", "move"}, exitOK, "usage: walctl move [flags] <channel> [<node>]", ""},
		{[]string{"move", "-h"}, exitOK, "-wait", ""},
		{[]string{"channels", "--help"}, exitOK, "usage: walctl channels", ""},
		{[]string{"tail", "ch", "-help"}, exitOK, "-until-caught-up", ""},
		{[]string{"-json", "explain", "--help"}, exitOK, "usage: walctl explain [flags] <channel>", ""},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		code := run(ctx, tc.args, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
		r := result{code: code, out: out.String(), errOut: errOut.String()}
		require.Equal(t, tc.code, r.code, "walctl %q:\n%s", tc.args, r)
		require.Contains(t, r.out, tc.out, "walctl %q", tc.args)
		require.Contains(t, r.errOut, tc.err, "walctl %q", tc.args)
		if tc.code == exitUsage {
			require.Contains(t, r.errOut, "usage: walctl", "walctl %q: the usage comes with the error", tc.args)
		}
	}
}

// Every request that cannot take effect fails, exit 1, with a reason:
// refused up front from the cluster's state, or reported after the
// coordinator refused it.
func TestRefusals(t *testing.T) {
	h := newHarness(t)
	h.startNode("n1")
	h.startNode("n2")
	h.startCoordinator("c0", "c1")
	owner := h.owner("c0")
	other := map[string]string{"n1": "n2", "n2": "n1"}[owner]
	// "orphan" has an assignment but the coordinator does not manage it:
	// nothing up front rules a move out, the coordinator refuses it.
	h.assign("orphan", "n1", 1)
	h.waitFor("orphan open", func(s cluster.Snapshot) bool { return s.Opened["orphan"].Value.Term == 1 })

	cases := []struct {
		name string
		args []string
		err  string
	}{
		{"move to an unknown node", []string{"move", "c0", "nosuchnode"}, `unknown node "nosuchnode" (walctl nodes lists the nodes)`},
		{"move of an unknown channel", []string{"move", "nosuchchannel", other}, `unknown channel "nosuchchannel": it has no assignment (walctl channels lists the channels)`},
		{"move to its owner", []string{"move", "c0", owner}, "is already on node " + owner},
		{"move to an invalid node", []string{"move", "c0", "a/b"}, "node id"},
		{"drain an unknown node", []string{"drain", "nosuchnode"}, `unknown node "nosuchnode"`},
		{"undrain a node not drained", []string{"undrain", "n1"}, `node "n1" is not drained`},
		{"append to an unknown channel", []string{"append", "nosuchchannel", "x"}, `unknown channel "nosuchchannel"`},
		{"tail an unknown channel", []string{"tail", "nosuchchannel"}, `unknown channel "nosuchchannel"`},
		{"explain an unknown channel", []string{"explain", "nosuchchannel"}, `unknown channel "nosuchchannel"`},
		{"a move the coordinator refuses", []string{"move", "orphan", "n2"}, "the coordinator refused to move orphan: channel is not managed"},
	}
	for _, tc := range cases {
		start := time.Now()
		r := h.walctl(tc.args...)
		require.Equal(t, exitFailed, r.code, "%s:\n%s", tc.name, r)
		require.Contains(t, r.errOut, tc.err, tc.name)
		require.Empty(t, r.out, "%s: nothing reported as done", tc.name)
		require.Less(t, time.Since(start), 25*time.Second, "%s: at once, not at the timeout", tc.name)
	}
	s := h.waitFor("no request left behind", func(s cluster.Snapshot) bool { return len(s.Moves) == 0 })
	require.Empty(t, s.Drains)
	require.Equal(t, owner, s.Assignments["c0"].Value.Node, "nothing moved")

	// A drained node takes nothing.
	r := h.walctl("drain", other)
	require.Equal(t, exitOK, r.code, "%s", r)
	r = h.walctl("move", "c0", other)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "node "+other+" is drained since")
	require.Contains(t, r.errOut, "walctl undrain "+other)
	// Draining the other node too would leave its channels nowhere.
	r = h.walctl("drain", owner)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "cannot drain "+owner+": no other live, undrained node could take its")
	// With one live node, a move has nowhere to go.
	r = h.walctl("move", "c0")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, `nowhere to move "c0": no live, undrained node other than its owner `+owner)
	// Draining a drained node changes nothing and says so.
	r = h.walctl("drain", other)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "was drained already")
	r = h.walctl("undrain", other)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "undrained "+other)
}

// Without a coordinator nothing would act on a move or a drain: refused.
// Appending to a channel whose owner is gone with no node to take it fails
// at once.
func TestNoCoordinatorNoNode(t *testing.T) {
	h := newHarness(t)
	stop := h.startNode("n1")
	h.startNode("n2")
	h.assign("c0", "n1", 1)
	h.waitFor("c0 open", func(s cluster.Snapshot) bool { return s.Opened["c0"].Value.Term == 1 })
	r := h.walctl("move", "c0", "n2")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "no coordinator runs for this cluster")
	r = h.walctl("drain", "n1")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "no coordinator runs for this cluster")

	stop()
	h.waitFor("n1 gone", func(s cluster.Snapshot) bool { _, ok := s.Nodes["n1"]; return !ok })
	r = h.walctl("move", "c0", "n1")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "node n1 is not live: its lease is gone")
	r = h.walctl("explain", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "serving:")
	require.Contains(t, r.out, "no: its owner n1 is not live (its lease is gone); the coordinator moves it to another live node (n2) at term 2")
}

// Appending to a channel whose owner is gone fails at once when no live
// node could take it over.
func TestAppendNowhere(t *testing.T) {
	h := newHarness(t)
	h.assign("c0", "ghost", 3) // a node that never registered
	r := h.walctl("append", "c0", "x")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, `channel "c0" has no live owner (ghost is gone) and no live node can take it over`)
	r = h.walctl("explain", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "ghost (not live)")
	require.Contains(t, r.out, "no live node can take it")
	r = h.walctl("explain", "nothing")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "the cluster has no live node")
}

// A node drained already whose channels have nowhere to go: said at once.
func TestDrainedNowhere(t *testing.T) {
	h := newHarness(t)
	h.startNode("n1")
	h.assign("c0", "n1", 1)
	require.NoError(t, coordinator.RequestDrain(h.ctx, h.cli, h.layout, "n1"))
	r := h.walctl("drain", "n1")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "n1 is drained already, but its 1 channel(s) (c0) have nowhere to go")
}

// move, drain and rebalance take effect and say how; -wait waits until the
// new owner serves.
func TestSteer(t *testing.T) {
	h := newHarness(t)
	h.startNode("n1")
	h.startNode("n2")
	h.startCoordinator("c0", "c1", "c2", "c3")
	owner := h.owner("c0")
	other := map[string]string{"n1": "n2", "n2": "n1"}[owner]
	term := func(ch string) int64 { s, _ := h.view.Snapshot(); return s.Assignments[ch].Value.Term }
	t0 := term("c0")

	r := h.walctl("move", "c0", other, "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, fmt.Sprintf("c0 moves from %s to %s at term %d", owner, other, t0+1))
	require.Contains(t, r.out, fmt.Sprintf("c0 is served by %s at term %d", other, t0+1))
	require.Equal(t, other, h.owner("c0"))

	// channels -v times the move by phase once an append was acknowledged
	// at the new term (a planned move: nothing was detected).
	r = h.walctl("append", "c0", "after the move")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = h.walctl("channels", "-v", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var phases struct {
		Channel string     `json:"channel"`
		Move    movePhases `json:"move"`
	}
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		require.NoError(t, json.Unmarshal([]byte(line), &phases))
		if phases.Channel == "c0" {
			break
		}
	}
	require.Equal(t, "c0", phases.Channel, "%s", r)
	m0 := phases.Move
	require.Nil(t, m0.Detected, "%s", r)
	for name, p := range map[string]*float64{"decide": m0.DecideMS, "fence": m0.FenceMS, "tail": m0.TailMS, "first": m0.FirstMS} {
		require.NotNil(t, p, "phase %s unknown: %s", name, r)
	}
	r = h.walctl("channels", "-v")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "DETECTED", "%s", r)

	// Flags before the command work as well; JSON, one object per line.
	r = h.walctl("-json", "-wait", "move", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 2, "%s", r)
	var m moved
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &m))
	require.Equal(t, moved{Channel: "c0", From: other, To: owner, Term: t0 + 2, Serving: true}, m)

	// Drain: every channel leaves the node, and is served elsewhere.
	r = h.walctl("drain", "n1", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "drain of n1 requested")
	s, _ := h.view.Snapshot()
	require.Empty(t, channelsOf(s, "n1"))
	for _, ch := range []string{"c0", "c1", "c2", "c3"} {
		require.Equal(t, "n2", s.Assignments[ch].Value.Node)
	}
	r = h.walctl("nodes", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, `"drained":true`)
	r = h.walctl("undrain", "n1")
	require.Equal(t, exitOK, r.code, "%s", r)

	// Rebalance: two channels go back, each decided, then served.
	r = h.walctl("rebalance", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Equal(t, 2, strings.Count(r.out, "moves from n2 to n1"), "%s", r)
	require.Equal(t, 2, strings.Count(r.out, "is served by n1"), "%s", r)
	r = h.walctl("rebalance")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Equal(t, "balanced\n", r.out)
}

// tail: a header, positions that -from takes back, -n, --until-caught-up.
func TestTail(t *testing.T) {
	h := newHarness(t)
	h.startNode("n1")
	h.startCoordinator("c0")
	r := h.walctl("append", "c0", "alpha", "beta", "gamma", "delta")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = h.walctlIn("epsilon\nzeta\n", "append", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "appended 2")

	type line struct{ pos, time, term, payload string }
	parse := func(r result) []line {
		t.Helper()
		require.Equal(t, exitOK, r.code, "%s", r)
		rows := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
		require.Equal(t, "POSITION\tTIME\tTERM\tPAYLOAD", rows[0], "the header")
		var out []line
		for _, row := range rows[1:] {
			f := strings.Split(row, "\t")
			require.Len(t, f, 4, row)
			out = append(out, line{f[0], f[1], f[2], f[3]})
		}
		return out
	}
	payloads := func(ls []line) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.payload)
		}
		return out
	}
	all := parse(h.walctl("tail", "c0", "--until-caught-up"))
	require.Equal(t, []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}, payloads(all))
	require.Equal(t, "start", all[0].pos)
	_, err := time.Parse("2006-01-02T15:04:05.000Z07:00", all[0].time)
	require.NoError(t, err)

	r = h.walctl("tail", "c0", "-until-caught-up")
	require.Contains(t, r.errOut, "tail c0 (owner n1, term 1): from the first message kept, until caught up")
	require.Contains(t, r.errOut, "caught up: 6 message(s)")

	last := parse(h.walctl("tail", "c0", "-n", "2", "-until-caught-up"))
	require.Equal(t, []string{"epsilon", "zeta"}, payloads(last))
	require.Equal(t, all[4].pos, last[0].pos, "the same message, the same position")

	from := parse(h.walctl("tail", "-until-caught-up", "-from", all[2].pos, "c0"))
	require.Equal(t, []string{"gamma", "delta", "epsilon", "zeta"}, payloads(from))
	from = parse(h.walctl("tail", "c0", "-from", "start", "-n", "1", "-until-caught-up"))
	require.Equal(t, []string{"zeta"}, payloads(from))

	r = h.walctl("tail", "c0", "-from", "garbage", "-until-caught-up")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "-from garbage")

	r = h.walctl("tail", "c0", "-n", "0", "-until-caught-up")
	require.Empty(t, parse(r), "nothing before now")

	r = h.walctl("tail", "c0", "-n", "1", "-until-caught-up", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &d))
	require.Equal(t, "zeta", d["payload"])
	require.Equal(t, all[5].pos, d["position"])

	// Following: a tail with a timeout ends there, done; what it printed
	// by then depends on the machine's speed, so only its form is checked.
	r = h.walctl("tail", "c0", "-n", "1", "-timeout", "3s")
	require.Equal(t, exitOK, r.code, "%s", r)
	for _, l := range parse(r) {
		require.Equal(t, "zeta", l.payload)
	}
}

// explain says who owns a channel and why it serves or not, from the
// cluster and the owner's own account.
func TestExplain(t *testing.T) {
	h := newHarness(t)
	h.startNode("n1")
	h.startNode("n2")
	h.startCoordinator("c0")
	owner := h.owner("c0")
	r := h.walctl("append", "c0", "x")
	require.Equal(t, exitOK, r.code, "%s", r)

	r = h.walctl("explain", "c0")
	require.Equal(t, exitOK, r.code, "%s", r)
	for _, want := range []string{"channel:", "c0", "owner:", owner + " (", ", live)", "term:", "assigned since",
		"serving:", "yes", "health:", "healthy", "appends:", "1 ok, 0 failed, 0 waiting; last at",
		"readers:", "0 on " + owner, "retained:", "unknown: " + owner + " has not measured the log at term 1", "backend:", "memory"} {
		require.Contains(t, r.out, want)
	}
	r = h.walctl("explain", "c0", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	var x explanation
	require.NoError(t, json.Unmarshal([]byte(r.out), &x))
	require.True(t, x.Serving)
	require.Equal(t, owner, x.Owner)
	require.Equal(t, "healthy", x.Health)
	require.EqualValues(t, 1, x.AppendsOK)
	require.Equal(t, "memory", x.Backend)

	// A channel whose open fails: the backend holds a higher term.
	o, err := memory.New(h.ctx, memory.Config{Cluster: h.mem})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	w, err := o.Open(h.ctx, walimpls.Channel{Name: "broken", Term: 7, Mode: walimpls.ReadWrite})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	h.assign("broken", "n1", 4)
	h.waitFor("the failed open reported", func(s cluster.Snapshot) bool { return s.Opened["broken"].Value.Error != "" })
	r = h.walctl("explain", "broken")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "no: open failing on n1 at term 4:")
	require.Contains(t, r.out, "last error:")

	// A refused move shows up.
	r = h.walctl("move", "broken", "n2")
	require.Equal(t, exitFailed, r.code, "%s", r)
	r = h.walctl("explain", "broken")
	require.Contains(t, r.out, "last refusal:")
	require.Contains(t, r.out, "channel is not managed")
}

func TestPlanRebalance(t *testing.T) {
	s := cluster.Snapshot{Nodes: map[string]cluster.Versioned[cluster.NodeInfo]{}, Assignments: map[string]cluster.Versioned[cluster.Assignment]{},
		Drains: map[string]cluster.Versioned[cluster.DrainRequest]{}}
	for _, id := range []string{"a", "b", "c", "d"} {
		s.Nodes[id] = cluster.Versioned[cluster.NodeInfo]{}
	}
	s.Drains["d"] = cluster.Versioned[cluster.DrainRequest]{}
	for _, ch := range []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6"} {
		s.Assignments[ch] = cluster.Versioned[cluster.Assignment]{Value: cluster.Assignment{Channel: ch, Node: "a"}}
	}
	moves := planRebalance(s)
	count := map[string]int{"a": 7}
	for _, m := range moves {
		require.NotEqual(t, "d", m.to, "a drained node takes nothing")
		count[m.from]--
		count[m.to]++
	}
	require.Equal(t, map[string]int{"a": 3, "b": 2, "c": 2}, count)
	require.Len(t, moves, 4, "the fewest moves")

	// Balanced already: nothing to do; one node: nothing to do.
	require.Empty(t, planRebalance(cluster.Snapshot{Nodes: s.Nodes, Drains: s.Drains, Assignments: map[string]cluster.Versioned[cluster.Assignment]{}}))
}
