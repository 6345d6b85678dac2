package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

// Command lines of migrate walctl cannot run: exit 2 with its usage.
func TestMigrateCommandLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cases := []struct {
		args []string
		code int
		out  string // a part of stdout
		err  string // a part of stderr
	}{
		{[]string{"migrate"}, exitUsage, "", "wants <channel> <backend>, got 0"},
		{[]string{"migrate", "c0"}, exitUsage, "", "wants <channel> <backend> (or -all <backend>, -cancel <channel>), got 1"},
		{[]string{"migrate", "c0", "kafka", "x"}, exitUsage, "", "got 3"},
		{[]string{"migrate", "-all"}, exitUsage, "", "got 0"},
		{[]string{"migrate", "-all", "c0", "kafka"}, exitUsage, "", "-all wants <backend>, got 2"},
		{[]string{"migrate", "-cancel", "c0", "kafka"}, exitUsage, "", "-cancel wants <channel>, got 2"},
		{[]string{"migrate", "-cancel", "-all", "c0"}, exitUsage, "", "-cancel takes one channel"},
		{[]string{"migrate", "c0", "-cancel", "-dry-run"}, exitUsage, "", "-cancel takes one channel"},
		{[]string{"migrate", "c0", "kafka", "-bogus"}, exitUsage, "", "flag provided but not defined: -bogus"},

		{[]string{"help", "migrate"}, exitOK, "usage: walctl migrate [flags] <channel> <backend>", ""},
		{[]string{"migrate", "-h"}, exitOK, "-dry-run", ""},
		{[]string{"help"}, exitOK, "migrate <channel> <backend>", ""},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		code := run(ctx, tc.args, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
		r := result{code: code, out: out.String(), errOut: errOut.String()}
		require.Equal(t, tc.code, r.code, "walctl %q:\n%s", tc.args, r)
		require.Contains(t, r.out, tc.out, "walctl %q", tc.args)
		require.Contains(t, r.errOut, tc.err, "walctl %q", tc.args)
		if tc.code == exitUsage {
			require.Contains(t, r.errOut, "usage: walctl migrate", "walctl %q: the usage comes with the error", tc.args)
		}
	}
	var out bytes.Buffer
	require.Equal(t, exitUsage, run(ctx, []string{"channels", "-all"}, env{out: &out, errOut: &out}), "-all is migrate's")
	out.Reset()
	require.Equal(t, exitOK, run(ctx, []string{"help", "migrate"}, env{out: &out, errOut: &out}))
	for _, flag := range []string{"-all", "-cancel", "-dry-run", "-wait"} {
		require.Contains(t, out.String(), flag)
	}
}

func TestMigrateArgs(t *testing.T) {
	ch, b, msg := migrateArgs(options{}, []string{"c0", "kafka"})
	require.Equal(t, []string{"c0", "kafka", ""}, []string{ch, b, msg})
	ch, b, msg = migrateArgs(options{all: true}, []string{"kafka"})
	require.Equal(t, []string{"", "kafka", ""}, []string{ch, b, msg})
	ch, b, msg = migrateArgs(options{cancel: true}, []string{"c0"})
	require.Equal(t, []string{"c0", "", ""}, []string{ch, b, msg})
	_, _, msg = migrateArgs(options{all: true, dryRun: true}, []string{"kafka"})
	require.Empty(t, msg, "-all -dry-run plans every channel")
}

// testChains is a snapshot of three channels and their chains: c0 on
// local, c1 with a migration to pulsar pending, c2 without a chain, c3 on
// kafka already; c0's owner n1 is drained.
func testChains() (cluster.Snapshot, map[string]chain.Chain) {
	s := cluster.Snapshot{Nodes: map[string]cluster.Versioned[cluster.NodeInfo]{"n1": {}, "n2": {}},
		Drains:      map[string]cluster.Versioned[cluster.DrainRequest]{"n1": {}},
		Assignments: map[string]cluster.Versioned[cluster.Assignment]{}}
	for i, ch := range []string{"c0", "c1", "c2", "c3"} {
		node := "n2"
		if i == 0 {
			node = "n1"
		}
		s.Assignments[ch] = cluster.Versioned[cluster.Assignment]{Value: cluster.Assignment{Channel: ch, Node: node, Term: int64(i + 1)}}
	}
	on := func(ch, name string, index uint64, first int64) chain.Chain {
		c := chain.Chain{Channel: ch}
		for i := uint64(0); i <= index; i++ {
			c.Segments = append(c.Segments, chain.Segment{Index: i, Backend: chain.Backend{Name: "local", Kind: "local", Channel: ch}})
		}
		last := &c.Segments[len(c.Segments)-1]
		last.Backend = chain.Backend{Name: name, Kind: name, Channel: ch}
		if index > 0 {
			last.Backend.Channel += "-s1"
		}
		last.FirstTerm = first
		return c
	}
	c1 := on("c1", "local", 0, 0)
	c1.Pending = &chain.Migration{Target: chain.Backend{Name: "pulsar", Kind: "pulsar", Channel: "c1-s1"}, Term: 9, By: "ops", At: time.Date(2026, 12, 5, 14, 2, 11, 0, time.UTC)}
	return s, map[string]chain.Chain{"c0": on("c0", "local", 0, 0), "c1": c1, "c3": on("c3", "kafka", 1, 3)}
}

func TestPlanMigrate(t *testing.T) {
	s, chains := testChains()
	plan, err := planMigrate(s, chains, []string{"c0"}, "kafka", false)
	require.NoError(t, err)
	require.Equal(t, []planned{{Channel: "c0", Backend: "local/c0", Segment: 0, To: "kafka", ToChannel: "c0-s1", Term: 1, NewTerm: 2, Owner: "n1"}}, plan,
		"a drained owner: another node opens the new segment")

	_, err = planMigrate(s, chains, []string{"c3"}, "kafka", false)
	require.EqualError(t, err, `channel "c3" is on backend kafka already (segment 1, since term 3)`)
	_, err = planMigrate(s, chains, []string{"c1"}, "kafka", false)
	require.EqualError(t, err, `another migration of c1 (to pulsar at term 9, requested by "ops") is pending: walctl migrate -cancel c1 first`)
	_, err = planMigrate(s, chains, []string{"nosuch"}, "kafka", false)
	require.ErrorContains(t, err, `unknown channel "nosuch"`)

	plan, err = planMigrate(s, chains, []string{"c1"}, "pulsar", false)
	require.NoError(t, err)
	require.Equal(t, int64(9), plan[0].NewTerm, "pending already: its term")
	require.Equal(t, "pending already: requested by \"ops\" at 2026-12-05T14:02:11Z", plan[0].Note)

	plan, err = planMigrate(s, chains, []string{"c0", "c1", "c2", "c3"}, "kafka", true)
	require.NoError(t, err)
	var names []string
	for _, p := range plan {
		names = append(names, p.Channel)
	}
	require.Equal(t, []string{"c0", "c2"}, names, "-all leaves out those on kafka and those migrating elsewhere")
	require.Equal(t, int64(-1), plan[1].Segment)
	require.Equal(t, "n2", plan[1].NewOwner)
	require.Contains(t, plan[1].Note, "no chain yet")
}

func TestPrintPlan(t *testing.T) {
	s, chains := testChains()
	plan, err := planMigrate(s, chains, []string{"c0", "c1", "c2", "c3"}, "pulsar", true)
	require.NoError(t, err)
	var out bytes.Buffer
	c := &ctl{out: &out}
	require.NoError(t, c.printPlan(plan))
	require.Equal(t, strings.Join([]string{
		"CHANNEL  BACKEND      SEGMENT  TO            TERM    OWNER                      NOTE",
		"c0       local/c0     0        pulsar/c0-s1  1 -> 2  n1 -> (another live node)  ",
		`c1       local/c1     0        pulsar/c1-s1  2 -> 9  n2                         pending already: requested by "ops" at 2026-12-05T14:02:11Z`,
		"c2       -            -        pulsar        3 -> 4  n2                         no chain yet: its owner's first open as a chain makes one",
		"c3       kafka/c3-s1  1        pulsar/c3-s2  4 -> 5  n2                         ",
	}, "\n")+"\n", out.String())
	out.Reset()
	c.json = true
	require.NoError(t, c.printPlan(plan[:1]))
	require.JSONEq(t, `{"channel":"c0","backend":"local/c0","segment":0,"to":"pulsar","to_channel":"c0-s1","term":1,"new_term":2,"owner":"n1"}`, out.String())
}

// The harness's cluster with chains in its meta store, its coordinator
// without: what the cluster's state rules out is refused at once, a dry
// run too, and so is every migration (the coordinator says it runs without
// chains); channels -v and explain show the chains and a refusal, -cancel
// withdraws a pending migration.
func TestMigrateSteer(t *testing.T) {
	h := newHarness(t)
	h.startNode("n1")
	h.startNode("n2")
	h.startCoordinator("c0", "c1", "c2")
	kv, err := etcdstore.New(h.cli, etcdstore.Options{Prefix: metaPrefix(h.layout.Root)})
	require.NoError(t, err)
	defer func() { _ = kv.Close() }()
	store := chain.NewStore(kv, chain.Options{})
	for _, ch := range []string{"c0", "c1"} {
		_, err := store.Create(h.ctx, ch, chain.Backend{Name: "local", Kind: "memory", Channel: ch}, 0)
		require.NoError(t, err)
	}
	_, err = store.BeginMigration(h.ctx, "c1", chain.MigrationRequest{Segment: 0, Target: chain.Backend{Name: "pulsar", Kind: "memory", Channel: "c1-s1"}, Term: 50, By: "ops"})
	require.NoError(t, err)

	// The harness's coordinator runs without chains: a dry run is refused
	// as the migration would be.
	for _, args := range [][]string{{"migrate", "c0", "kafka", "-dry-run"}, {"migrate", "-all", "kafka", "-dry-run", "-json"}} {
		r := h.walctl(args...)
		require.Equal(t, exitFailed, r.code, "%q: %s", args, r)
		require.Contains(t, r.errOut, "this cluster runs without chains: its coordinator coord refuses every migration", "%q", args)
		require.Empty(t, r.out, "%q: no plan", args)
	}
	s, _ := h.view.Snapshot()
	require.Empty(t, s.Migrations, "a dry run writes nothing")

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"migrate", "c0", "local"}, `channel "c0" is on backend local already (segment 0, since term 0)`},
		{[]string{"migrate", "c1", "kafka"}, `another migration of c1 (to pulsar at term 50, requested by "ops") is pending: walctl migrate -cancel c1 first`},
		{[]string{"migrate", "nosuch", "kafka"}, `unknown channel "nosuch"`},
		{[]string{"migrate", "c0", "a/b"}, "backend entry name"},
		// The harness's coordinator runs without chains: refused before
		// anything is written.
		{[]string{"migrate", "c0", "kafka"}, "this cluster runs without chains: its coordinator coord refuses every migration"},
		{[]string{"migrate", "-cancel", "c2"}, "no migration of c2 is requested or pending"},
	} {
		r := h.walctl(tc.args...)
		require.Equal(t, exitFailed, r.code, "%q: %s", tc.args, r)
		require.Contains(t, r.errOut, tc.err, "%q", tc.args)
	}

	require.Empty(t, h.requests(), "nothing written")
	// A request written all the same (by an older walctl): the
	// coordinator refuses it, and explain shows why.
	rev, err := coordinator.RequestMigrate(h.ctx, h.cli, h.layout, "c0", "kafka", "ops")
	require.NoError(t, err)
	h.waitFor("the request refused", func(s cluster.Snapshot) bool { _, ok := s.Migrations["c0"]; return s.Revision > rev && !ok })

	r := h.walctl("channels", "-v")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "BACKEND")
	require.Contains(t, r.out, "local/c0")
	require.Contains(t, r.out, "to pulsar/c1-s1 at term 50 (by ops)")
	r = h.walctl("channels", "-v", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, `"chain":{"backend":"local/c1","segment":0,"segments":1,"pending":{`)
	r = h.walctl("explain", "c1")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "writes on local/c1 (segment 0 of 1 kept)")
	require.Contains(t, r.out, "migration:")
	require.Contains(t, r.out, "to pulsar/c1-s1 at term 50")
	r = h.walctl("explain", "c0")
	require.Contains(t, r.out, "last refusal:")
	require.Contains(t, r.out, "migrate: this cluster runs without chains")

	r = h.walctl("migrate", "-cancel", "c1")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "the migration of c1 to pulsar at term 50 cancelled: it stays on local/c1")
	c1, err := store.Get(h.ctx, "c1")
	require.NoError(t, err)
	require.Nil(t, c1.Pending)
	r = h.walctl("migrate", "-cancel", "c1")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "no migration of c1 is requested or pending")
}
