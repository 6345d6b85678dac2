package coordinator

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cluster"
)

// TestDecideScripts drives the pure decision rules step by step. Each line
// is `command args` (no output expected) or `command args => output`; see
// decideModel.run for the commands and formatChange for the output.
func TestDecideScripts(t *testing.T) {
	cases := []struct{ name, script string }{
		{"initial placement is balanced, ties go to the smallest id", `
			channels c1 c2 c3 c4 c5 c6 c7
			node n2 n3 n1
			step => c1: new n1@1; c2: new n2@1; c3: new n3@1; c4: new n1@1; c5: new n2@1; c6: new n3@1; c7: new n1@1
			loads => n1=3 n2=2 n3=2
			decide => none
			opened c1 n1 1
			opened c2 n2 1 err=boom
			opened c3 n1 1
			step => c1: confirm n1@1
			show c1 => n1@1 assigned
			show c2 => n2@1 assigning
			decide => none`},
		{"duplicate and unsorted channels are placed once", `
			channels b a b
			node n1
			step => a: new n1@1; b: new n1@1`},
		{"no live node: nothing changes", `
			channels a
			decide => none
			node n1
			drain n1
			decide => none
			assign a n1 4 assigned
			gone n1
			decide => none
			show a => n1@4 assigned`},
		{"a lost owner's channels move with term+1, Previous names it", `
			channels a b c d
			node n1 n2
			step => a: new n1@1; b: new n2@1; c: new n1@1; d: new n2@1
			opened a n1 1
			opened b n2 1
			opened c n1 1
			opened d n2 1
			step => a: confirm n1@1; b: confirm n2@1; c: confirm n1@1; d: confirm n2@1
			node n3
			gone n1
			step => a: owner_lost n1@1 -> n3@2; c: owner_lost n1@1 -> n3@2
			show a => n3@2 assigning prev=[n1@1]
			loads => n2=2 n3=2
			opened a n3 2
			step => a: confirm n3@2
			show a => n3@2 assigned`},
		{"an assigning channel whose owner dies moves again; Previous keeps the last four", `
			channels a
			node n9
			assign a n1 7 assigning prev=n2@3,n3@4,n4@5,n5@6
			step => a: owner_lost n1@7 -> n9@8
			show a => n9@8 assigning prev=[n3@4 n4@5 n5@6 n1@7]`},
		{"a migration's intent assigns the same live owner at its term, once", `
			channels a b
			node n1 n2
			assign a n1 3 assigned
			assign b n2 1 assigned
			migrate a kafka
			decide => none
			intent a 4
			step => a: migrate n1@3 -> n1@4 +migrate-term=4
			show a => n1@4 assigning prev=[n1@3]
			migration a => to kafka term 4
			loads => n1=1 n2=1
			step => none
			opened a n1 4
			step => a: confirm n1@4
			migdone a
			step => a: migrate-done
			migration a => none
			show a => n1@4 assigned`},
		{"a migrating channel whose owner is gone moves at the intent's term to another node", `
			channels a
			node n1 n2
			assign a n1 3 assigned
			migrate a kafka
			intent a 4
			gone n1
			step => a: owner_lost n1@3 -> n2@4 +migrate-term=4`},
		{"a drained owner: the migration moves the channel, at its term", `
			channels a
			node n1 n2
			assign a n1 3 assigned
			drain n1
			migrate a kafka
			intent a 4
			step => a: drain n1@3 -> n2@4 +migrate-term=4`},
		{"a move request and a migration: one assignment at the intent's term", `
			channels a
			node n1 n2
			assign a n1 3 assigned
			migrate a kafka
			intent a 4
			move a n2
			step => a: request n1@3 -> n2@4 +del-move +migrate-term=4`},
		{"migrate requests refused, of unmanaged channels too", `
			channels a
			node n1
			assign a n1 1 assigned
			migrate a nosuch
			migrate z kafka
			migrefuse a backend "nosuch": unknown
			step => a: migrate-refused (backend "nosuch": unknown); z: migrate-refused (channel is not managed)
			migration a => none
			migration z => none`},
		{"a term that cannot grow is left alone", `
			channels a
			node n2
			assign a n1 max assigned
			decide => none`},
		{"drain moves every channel off; undrain makes the node eligible again", `
			channels a b c
			node n1 n2
			assign a n1 1 assigned
			assign b n1 1 assigned
			assign c n2 3 assigned
			drain n1
			step => a: drain n1@1 -> n2@2; b: drain n1@1 -> n2@2
			loads => n2=3
			channels a b c d
			step => d: new n2@1
			undrain n1
			channels a b c d e
			step => e: new n1@1
			loads => n1=1 n2=4`},
		{"a drained node whose key goes is lost, not drained", `
			channels a
			node n1 n2
			assign a n1 1 assigned
			drain n1
			gone n1
			step => a: owner_lost n1@1 -> n2@2`},
		{"move requests: to a node, to the least loaded, and unplaceable ones", `
			channels a b c
			node n1 n2 n3
			assign a n1 1 assigned
			assign b n1 1 assigned
			assign c n2 5 assigned
			move a n3
			step => a: request n1@1 -> n3@2 +del-move
			move b -
			step => b: request n1@1 -> n2@2 +del-move
			loads => n1=0 n2=2 n3=1
			move c ghost
			step => c: drop-move (node "ghost" is not live)
			move c n2
			step => c: drop-move (already on node "n2")
			drain n1
			move c n1
			step => c: drop-move (node "n1" is not live)
			move zz n1
			step => zz: drop-move (channel is not managed)
			moves => none
			show c => n2@5 assigned`},
		{"a move with nowhere to go is dropped", `
			channels a
			node n1
			assign a n1 2 assigned
			move a -
			step => a: drop-move (no other live node)`},
		{"a move request for an unassigned channel places it", `
			channels a b
			node n1 n2
			move b n2
			step => a: new n1@1; b: new n2@1 +del-move
			moves => none`},
		{"a move request for a channel with a lost owner goes where asked", `
			channels a
			node n2 n3
			assign a n1 3 assigning
			move a n3
			step => a: owner_lost n1@3 -> n3@4 +del-move`},
		{"a move request overtakes a pending open", `
			channels a
			node n1 n2
			assign a n1 3 assigning
			opened a n1 3
			move a n2
			step => a: request n1@3 -> n2@4 +del-move
			decide => none`},
		{"only the owner's report at its exact term confirms", `
			channels a
			node n1 n2
			assign a n2 4 assigning prev=n1@3
			opened a n1 3
			decide => none
			opened a n1 4
			decide => none
			opened a n2 3
			decide => none
			opened a n2 4 err=disk
			decide => none
			opened a n2 4
			decide => a: confirm n2@4`},
		{"an assigned channel ignores later reports", `
			channels a
			node n1 n2
			assign a n1 4 assigned
			opened a n1 4 err=broken
			at 1h
			decide => none`},
		{"open timeout: never opened, or open failed, moves after OpenTimeout", `
			channels a b
			node n1 n2
			assign a n1 1 assigning
			assign b n1 1 assigning
			opened b n1 1 err=boom
			at 29s
			decide => none
			status => assigning=2 overdue=[]
			at 30s
			status => assigning=2 overdue=[a b]
			step => a: open_timeout n1@1 -> n2@2; b: open_timeout n1@1 -> n2@2
			show a => n2@2 assigning prev=[n1@1]
			status => assigning=2 overdue=[]`},
		{"open timeout with no other node: stays, reported overdue", `
			channels a
			node n1
			assign a n1 1 assigning
			at 1m
			decide => none
			status => assigning=1 overdue=[a]
			node n2
			step => a: open_timeout n1@1 -> n2@2`},
		{"a dead owner's channels move before its key goes, term+1, Previous names it", `
			channels a b c
			node n1 n2 n3
			assign a n1 1 assigned
			assign b n1 4 assigning
			assign c n2 1 assigned
			dead n1
			loads => n2=1 n3=0
			step => a: owner_dead n1@1 -> n3@2; b: owner_dead n1@4 -> n2@5
			show a => n3@2 assigning prev=[n1@1]
			decide => none
			gone n1
			decide => none`},
		{"a dead node gets no channel, and no move request can name it", `
			channels a b
			node n1 n2
			assign b n2 1 assigned
			dead n1
			move b n1
			step => a: new n2@1; b: drop-move (node "n1" is not live)
			loads => n2=2`},
		{"a dead node that registers again is live again: the death was of its old registration", `
			channels a
			node n1 n2
			assign a n1 1 assigned
			dead n1
			node n1
			decide => none
			loads => n1=1 n2=0
			channels a b c
			step => b: new n2@1; c: new n1@1`},
		{"a drained owner confirmed dead moves as dead", `
			channels a
			node n1 n2
			assign a n1 1 assigned
			drain n1
			dead n1
			step => a: owner_dead n1@1 -> n2@2`},
		{"a silent owner's channels move before its key goes, term+1; it gets none until heard again", `
			channels a b c
			node n1 n2 n3
			assign a n1 1 assigned
			assign b n1 4 assigning
			assign c n2 1 assigned
			silent n1
			loads => n2=1 n3=0
			step => a: owner_silent n1@1 -> n3@2; b: owner_silent n1@4 -> n2@5
			show a => n3@2 assigning prev=[n1@1]
			decide => none
			move a n1
			step => a: drop-move (node "n1" is not live)
			heard n1
			loads => n1=0 n2=2 n3=1
			channels a b c d
			step => d: new n1@1`},
		{"a silent node that registers again is live again: the silence was of its old registration", `
			channels a
			node n1 n2
			assign a n1 1 assigned
			silent n1
			node n1
			decide => none`},
		{"a dead owner found silent too moves as dead; a drained one as silent", `
			channels a b
			node n1 n2 n3
			assign a n1 1 assigned
			assign b n3 1 assigned
			silent n1
			dead n1
			drain n3
			silent n3
			step => a: owner_dead n1@1 -> n2@2; b: owner_silent n3@1 -> n2@2`},
		{"a suspect owner keeps its channels; new ones go to others while any is not suspect", `
			channels a b c
			node n1 n2
			assign a n1 1 assigned
			suspect n1
			step => b: new n2@1; c: new n2@1
			show a => n1@1 assigned
			suspect n2
			channels a b c d
			step => d: new n1@1
			alive n1
			alive n2
			channels a b c d e
			step => e: new n1@1`},
		{"a suspect node is still a valid move target when asked for by name", `
			channels a
			node n1 n2 n3
			assign a n1 1 assigned
			suspect n3
			move a n3
			step => a: request n1@1 -> n3@2 +del-move`},
		{"a suspect of an earlier registration is not suspect", `
			channels a b
			node n1 n2
			assign a n2 1 assigned
			suspect n1
			node n1
			step => b: new n1@1`},
		{"load counts assignments of unmanaged channels on live nodes only", `
			channels a b
			node n1 n2
			assign x n1 1 assigned
			assign y n3 1 assigned
			step => a: new n2@1; b: new n1@1
			show x => n1@1 assigned`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newDecideModel()
			for i, line := range strings.Split(strings.TrimSpace(tc.script), "\n") {
				line = strings.TrimSpace(line)
				cmd, want, expect := strings.Cut(line, "=>")
				got := m.run(t, strings.Fields(cmd))
				if expect {
					require.Equal(t, strings.TrimSpace(want), got, "line %d: %s", i+1, line)
				} else {
					require.Empty(t, got, "line %d: %s", i+1, line)
				}
			}
		})
	}
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// decideModel is a cluster in memory: the writes decide asks for apply to
// it as a successful transaction would, with etcd-like revisions.
type decideModel struct {
	rules    rules
	snap     cluster.Snapshot
	health   health
	rev      int64
	channels []string
	migs     map[string]migration
	now      time.Time
}

func newDecideModel() *decideModel {
	return &decideModel{
		rules: rules{openTimeout: 30 * time.Second},
		snap: cluster.Snapshot{
			Nodes:       map[string]cluster.Versioned[cluster.NodeInfo]{},
			Assignments: map[string]cluster.Versioned[cluster.Assignment]{},
			Opened:      map[string]cluster.Versioned[cluster.Opened]{},
			Moves:       map[string]cluster.Versioned[cluster.MoveRequest]{},
			Migrations:  map[string]cluster.Versioned[cluster.MigrateRequest]{},
			Drains:      map[string]cluster.Versioned[cluster.DrainRequest]{},
		},
		health: health{dead: map[string]death{}, suspect: map[string]int64{}, silent: map[string]death{}},
		migs:   map[string]migration{},
		now:    epoch,
	}
}

func (m *decideModel) next() int64 { m.rev++; m.snap.Revision = m.rev; return m.rev }

// run executes one command:
//
//	channels NAME...               the managed channels
//	node ID...                     register nodes
//	gone ID                        a node's key goes (its lease expired)
//	dead ID                        the detector confirms the node's current registration dead, now
//	suspect ID / alive ID          the detector suspects it / holds a stream to it again
//	silent ID / heard ID           the detector finds its current registration silent, now / hears it again
//	drain ID / undrain ID          add or delete a drain request
//	assign CH NODE TERM STATE [prev=N@T,...]   write an assignment (TERM may be max)
//	opened CH NODE TERM [err=MSG]  a node's open report
//	move CH NODE|-                 a move request (- for any node)
//	migrate CH BACKEND             a migrate request
//	intent CH TERM                 the chain step found the migration's intent at TERM
//	migdone CH / migrefuse CH WHY  the chain step found the request done / refused
//	at DURATION                    the clock, from the epoch (assignments are made at the epoch)
//	decide                         the changes decided, without applying them
//	step                           decide and apply the changes
//	show CH / loads / moves / status
func (m *decideModel) run(t *testing.T, args []string) string {
	t.Helper()
	switch args[0] {
	case "channels":
		m.channels = args[1:]
	case "node":
		for _, id := range args[1:] {
			m.snap.Nodes[id] = cluster.Versioned[cluster.NodeInfo]{Value: cluster.NodeInfo{ID: id}, Revision: m.next()}
		}
	case "gone":
		delete(m.snap.Nodes, args[1])
		m.next()
	case "dead":
		m.health.dead[args[1]] = death{rev: m.snap.Nodes[args[1]].Revision, at: m.now}
	case "suspect":
		m.health.suspect[args[1]] = m.snap.Nodes[args[1]].Revision
	case "alive":
		delete(m.health.suspect, args[1])
	case "silent":
		m.health.silent[args[1]] = death{rev: m.snap.Nodes[args[1]].Revision, at: m.now}
	case "heard":
		delete(m.health.silent, args[1])
	case "drain":
		m.snap.Drains[args[1]] = cluster.Versioned[cluster.DrainRequest]{Revision: m.next()}
	case "undrain":
		delete(m.snap.Drains, args[1])
		m.next()
	case "assign":
		term := int64(math.MaxInt64)
		if args[3] != "max" {
			term = atoi(t, args[3])
		}
		a := cluster.Assignment{Channel: args[1], Node: args[2], Term: term, State: cluster.State(args[4]), Since: epoch}
		for _, opt := range args[5:] {
			list, ok := strings.CutPrefix(opt, "prev=")
			require.True(t, ok, "option %q", opt)
			for _, o := range strings.Split(list, ",") {
				n, tm, _ := strings.Cut(o, "@")
				a.Previous = append(a.Previous, cluster.Owner{Node: n, Term: atoi(t, tm)})
			}
		}
		m.snap.Assignments[args[1]] = cluster.Versioned[cluster.Assignment]{Value: a, Revision: m.next()}
	case "opened":
		o := cluster.Opened{Channel: args[1], Node: args[2], Term: atoi(t, args[3])}
		if len(args) > 4 {
			o.Error = strings.TrimPrefix(args[4], "err=")
		}
		m.snap.Opened[args[1]] = cluster.Versioned[cluster.Opened]{Value: o, Revision: m.next()}
	case "move":
		to := args[2]
		if to == "-" {
			to = ""
		}
		m.snap.Moves[args[1]] = cluster.Versioned[cluster.MoveRequest]{Value: cluster.MoveRequest{To: to}, Revision: m.next()}
	case "migrate":
		m.snap.Migrations[args[1]] = cluster.Versioned[cluster.MigrateRequest]{Value: cluster.MigrateRequest{To: args[2]}, Revision: m.next()}
	case "intent":
		m.migs[args[1]] = migration{term: atoi(t, args[2])}
	case "migdone":
		m.migs[args[1]] = migration{done: true}
	case "migrefuse":
		m.migs[args[1]] = migration{refusal: strings.Join(args[2:], " ")}
	case "at":
		d, err := time.ParseDuration(args[1])
		require.NoError(t, err)
		m.now = epoch.Add(d)
	case "decide", "step":
		changes := m.rules.decide(m.snap, m.health, m.channels, m.migs, m.now)
		var out []string
		for _, c := range changes {
			out = append(out, formatChange(c))
			if args[0] == "step" {
				m.apply(t, c)
			}
		}
		if len(out) == 0 {
			return "none"
		}
		return strings.Join(out, "; ")
	case "show":
		a, ok := m.snap.Assignments[args[1]]
		if !ok {
			return "none"
		}
		s := fmt.Sprintf("%s@%d %s", a.Value.Node, a.Value.Term, a.Value.State)
		if len(a.Value.Previous) > 0 {
			var prev []string
			for _, o := range a.Value.Previous {
				prev = append(prev, fmt.Sprintf("%s@%d", o.Node, o.Term))
			}
			s += " prev=[" + strings.Join(prev, " ") + "]"
		}
		return s
	case "loads":
		d := newDecision(m.snap, m.health, m.rules, m.now)
		var out []string
		for _, n := range d.live {
			out = append(out, fmt.Sprintf("%s=%d", n, d.load[n]))
		}
		return strings.Join(out, " ")
	case "moves":
		if len(m.snap.Moves) == 0 {
			return "none"
		}
		return fmt.Sprint(len(m.snap.Moves))
	case "migration":
		r, ok := m.snap.Migrations[args[1]]
		if !ok {
			return "none"
		}
		return fmt.Sprintf("to %s term %d", r.Value.To, r.Value.Term)
	case "status":
		assigning, overdue := m.rules.status(m.snap, m.channels, m.now)
		return fmt.Sprintf("assigning=%d overdue=[%s]", assigning, strings.Join(overdue, " "))
	default:
		t.Fatalf("unknown command %q", args[0])
	}
	return ""
}

// apply performs c as the doer's transaction would, checking its
// conditions against the model first: a decision must only ever ask for
// writes whose conditions hold on the snapshot it read.
func (m *decideModel) apply(t *testing.T, c change) {
	t.Helper()
	if c.moveRev != 0 {
		require.Equal(t, c.moveRev, m.snap.Moves[c.channel].Revision, "move request revision of %s", c.channel)
	}
	if c.migrateRev != 0 {
		require.Equal(t, c.migrateRev, m.snap.Migrations[c.channel].Revision, "migrate request revision of %s", c.channel)
	}
	switch c.kind {
	case changeAssign, changeConfirm:
		cur, ok := m.snap.Assignments[c.channel]
		if c.rev == 0 {
			require.False(t, ok, "create of %s over an existing assignment", c.channel)
		} else {
			require.Equal(t, c.rev, cur.Revision, "assignment revision of %s", c.channel)
		}
		if c.kind == changeConfirm {
			require.Equal(t, c.openedRev, m.snap.Opened[c.channel].Revision)
			require.Equal(t, cur.Value.Term, c.next.Term)
		} else if mig := m.migs[c.channel]; mig.term > cur.Value.Term {
			require.Equal(t, mig.term, c.next.Term, "a migrating channel is assigned at its intent's term")
			require.NotZero(t, c.migrateRev, "an assignment at a migration's term records it in the request")
		} else {
			require.Equal(t, cur.Value.Term+1, c.next.Term, "a move bumps the term once")
			require.NotEqual(t, cur.Value.Node, c.next.Node, "a move changes the owner")
		}
		for _, g := range c.guards {
			var rev int64
			if g.kind == guardNode {
				rev = m.snap.Nodes[g.name].Revision
			} else {
				rev = m.snap.Drains[g.name].Revision
			}
			require.Equal(t, g.rev, rev, "guard %+v of %s", g, c.channel)
		}
		m.snap.Assignments[c.channel] = cluster.Versioned[cluster.Assignment]{Value: c.next, Revision: m.next()}
	}
	if c.moveRev != 0 {
		delete(m.snap.Moves, c.channel)
	}
	switch {
	case c.migrateRev != 0 && c.kind == changeDropMigrate:
		delete(m.snap.Migrations, c.channel)
		delete(m.migs, c.channel)
	case c.migrateRev != 0:
		m.snap.Migrations[c.channel] = cluster.Versioned[cluster.MigrateRequest]{Value: c.migrate, Revision: m.next()}
	}
}

func formatChange(c change) string {
	var s string
	switch c.kind {
	case changeAssign:
		if c.rev == 0 {
			s = fmt.Sprintf("%s: %s %s@%d", c.channel, c.reason, c.next.Node, c.next.Term)
		} else {
			s = fmt.Sprintf("%s: %s %s@%d -> %s@%d", c.channel, c.reason, c.prev.Node, c.prev.Term, c.next.Node, c.next.Term)
		}
	case changeConfirm:
		s = fmt.Sprintf("%s: confirm %s@%d", c.channel, c.next.Node, c.next.Term)
	case changeDropMove:
		return fmt.Sprintf("%s: drop-move (%s)", c.channel, c.note)
	case changeDropMigrate:
		if c.note == "" {
			return fmt.Sprintf("%s: migrate-done", c.channel)
		}
		return fmt.Sprintf("%s: migrate-refused (%s)", c.channel, c.note)
	}
	if c.moveRev != 0 {
		s += " +del-move"
	}
	if c.migrateRev != 0 {
		s += fmt.Sprintf(" +migrate-term=%d", c.migrate.Term)
	}
	return s
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

// TestDecideNewAssignmentFields pins what a decision writes beyond owner
// and term.
func TestDecideNewAssignmentFields(t *testing.T) {
	m := newDecideModel()
	m.run(t, []string{"channels", "a"})
	m.run(t, []string{"node", "n1", "n2"})
	m.run(t, []string{"assign", "a", "n1", "3", "assigned", "prev=n0@2"})
	m.run(t, []string{"gone", "n1"})
	m.now = epoch.Add(time.Hour)
	changes := m.rules.decide(m.snap, m.health, m.channels, m.migs, m.now)
	require.Len(t, changes, 1)
	c := changes[0]
	require.Equal(t, cluster.Assignment{
		Channel: "a", Node: "n2", Term: 4, State: cluster.Assigning,
		Previous: []cluster.Owner{{Node: "n0", Term: 2}, {Node: "n1", Term: 3}},
		Since:    m.now,
	}, c.next)
	require.Equal(t, m.snap.Assignments["a"].Revision, c.rev)
	// The decision does not alias the snapshot's Previous.
	require.Len(t, m.snap.Assignments["a"].Value.Previous, 1)
	require.True(t, slices.Equal([]string{"a"}, sortedUnique([]string{"a", "a"})))
}

// TestDecideGuards pins the conditions a move carries beyond the
// assignment's revision: the target registered as seen and not drained,
// a lost owner still gone, a drain still there.
func TestDecideGuards(t *testing.T) {
	m := newDecideModel()
	for _, line := range []string{"channels a b", "node n1 n2 n3", "assign a n1 1 assigned", "assign b n3 1 assigned", "drain n3", "gone n1"} {
		m.run(t, strings.Fields(line))
	}
	changes := m.rules.decide(m.snap, m.health, m.channels, m.migs, m.now)
	require.Len(t, changes, 2)
	n2 := m.snap.Nodes["n2"].Revision
	require.Equal(t, []guard{{guardNode, "n2", n2}, {guardDrain, "n2", 0}, {guardNode, "n1", 0}}, changes[0].guards)
	require.Equal(t, []guard{{guardNode, "n2", n2}, {guardDrain, "n2", 0}, {guardDrain, "n3", m.snap.Drains["n3"].Revision}}, changes[1].guards)
}

// TestDecideDeadOwner pins what a move off a dead owner carries: the time
// its death was confirmed, and a guard that the owner's key is still the
// registration the death is about (not absent, as for a lost owner).
func TestDecideDeadOwner(t *testing.T) {
	m := newDecideModel()
	for _, line := range []string{"channels a", "node n1 n2", "assign a n1 3 assigned", "at 5s", "dead n1", "at 6s"} {
		m.run(t, strings.Fields(line))
	}
	changes := m.rules.decide(m.snap, m.health, m.channels, m.migs, m.now)
	require.Len(t, changes, 1)
	c := changes[0]
	require.Equal(t, reasonOwnerDead, c.reason)
	require.Equal(t, epoch.Add(5*time.Second), c.detected)
	require.Equal(t, cluster.Assignment{
		Channel: "a", Node: "n2", Term: 4, State: cluster.Assigning,
		Previous: []cluster.Owner{{Node: "n1", Term: 3}},
		Since:    epoch.Add(6 * time.Second), Detected: epoch.Add(5 * time.Second),
	}, c.next)
	n1, n2 := m.snap.Nodes["n1"].Revision, m.snap.Nodes["n2"].Revision
	require.Equal(t, []guard{{guardNode, "n2", n2}, {guardDrain, "n2", 0}, {guardNode, "n1", n1}}, c.guards)
}

// TestDecideSilentOwner pins what a move off a silent owner carries: the
// time of the verdict, and a guard that the owner's key is still the
// registration the silence is about (its lease has not been revoked and
// the node has not registered again meanwhile).
func TestDecideSilentOwner(t *testing.T) {
	m := newDecideModel()
	for _, line := range []string{"channels a", "node n1 n2", "assign a n1 3 assigned", "at 5s", "silent n1", "at 6s"} {
		m.run(t, strings.Fields(line))
	}
	changes := m.rules.decide(m.snap, m.health, m.channels, m.migs, m.now)
	require.Len(t, changes, 1)
	c := changes[0]
	require.Equal(t, reasonOwnerSilent, c.reason)
	require.Equal(t, epoch.Add(5*time.Second), c.detected)
	require.Equal(t, cluster.Assignment{
		Channel: "a", Node: "n2", Term: 4, State: cluster.Assigning,
		Previous: []cluster.Owner{{Node: "n1", Term: 3}},
		Since:    epoch.Add(6 * time.Second), Detected: epoch.Add(5 * time.Second),
	}, c.next)
	n1, n2 := m.snap.Nodes["n1"].Revision, m.snap.Nodes["n2"].Revision
	require.Equal(t, []guard{{guardNode, "n2", n2}, {guardDrain, "n2", 0}, {guardNode, "n1", n1}}, c.guards)
}

// TestPlanMigration pins planMigration's rules, one case each.
func TestPlanMigration(t *testing.T) {
	onKafka := chain.Backend{Name: "kafka", Kind: "kafka", Channel: "a-s1"}
	seg := func(i uint64, b chain.Backend, first int64) chain.Segment {
		return chain.Segment{Index: i, Backend: b, FirstTerm: first}
	}
	local := chain.Backend{Name: "local", Kind: "local", Channel: "a"}
	onLocal := chain.Chain{Channel: "a", Segments: []chain.Segment{seg(0, local, 0)}}
	pending := func(to chain.Backend, term int64) chain.Chain {
		c := onLocal.Clone()
		c.Pending = &chain.Migration{Target: to, Term: term, By: "ops"}
		return c
	}
	sealed := chain.Chain{Channel: "a", Segments: []chain.Segment{seg(0, local, 0), seg(1, onKafka, 4)}}
	sealed.Segments[1].Created = epoch
	sealed.Segments[0].Seal = &chain.Seal{Term: 4}
	assigned := func(term int64, st cluster.State) cluster.Assignment {
		return cluster.Assignment{Channel: "a", Node: "n1", Term: term, State: st}
	}
	toKafka := cluster.MigrateRequest{To: "kafka", By: "ops"}
	started := toKafka
	started.Term = 4
	cases := []struct {
		name     string
		req      cluster.MigrateRequest
		a        cluster.Assignment
		assigned bool
		c        chain.Chain
		found    bool
		want     migrateStep
	}{
		{"no chain, never opened: wait", toKafka, assigned(1, cluster.Assigning), true, chain.Chain{}, false, migrateStep{kind: stepWait}},
		{"no chain, no assignment: wait", toKafka, cluster.Assignment{}, false, chain.Chain{}, false, migrateStep{kind: stepWait}},
		{"no chain, opened: refused", toKafka, assigned(3, cluster.Assigned), true, chain.Chain{}, false,
			migrateStep{kind: stepRefuse, note: "the channel has no chain: its owner n1 opened it at term 3 without one (its nodes run without chains)"}},
		{"nothing pending: begin at term+1", toKafka, assigned(3, cluster.Assigned), true, onLocal, true, migrateStep{kind: stepBegin, segment: 0, term: 4}},
		{"nothing pending, assigning: begin all the same", toKafka, assigned(3, cluster.Assigning), true, onLocal, true, migrateStep{kind: stepBegin, segment: 0, term: 4}},
		{"nothing pending, unassigned: wait", toKafka, cluster.Assignment{}, false, onLocal, true, migrateStep{kind: stepWait}},
		{"pending to To, assigned below: drive", toKafka, assigned(3, cluster.Assigned), true, pending(onKafka, 4), true, migrateStep{kind: stepDrive, segment: 0, term: 4}},
		{"pending to To, opening at its term: wait", started, assigned(4, cluster.Assigning), true, pending(onKafka, 4), true, migrateStep{kind: stepWait}},
		{"pending, opened at or above its term: a stray, cancel", toKafka, assigned(4, cluster.Assigned), true, pending(onKafka, 4), true, migrateStep{kind: stepCancel, segment: 0, term: 4}},
		{"pending, opened at its term after this request assigned it: no chains there, cancel and refuse", started, assigned(4, cluster.Assigned), true, pending(onKafka, 4), true,
			migrateStep{kind: stepCancel, segment: 0, term: 4, note: "its owner n1 opened the channel at term 4 without sealing the migration's segment: the node runs without chains"}},
		{"pending elsewhere, opened above: a stray, cancel", toKafka, assigned(9, cluster.Assigned), true, pending(chain.Backend{Name: "pulsar"}, 5), true, migrateStep{kind: stepCancel, segment: 0, term: 5}},
		{"pending to another backend: refused", toKafka, assigned(3, cluster.Assigned), true, pending(chain.Backend{Name: "pulsar"}, 4), true,
			migrateStep{kind: stepRefuse, note: `another migration (to pulsar at term 4, requested by "ops") is pending: cancel it first`}},
		{"sealed on To by this request: done", started, assigned(4, cluster.Assigned), true, sealed, true, migrateStep{kind: stepDone}},
		{"sealed after the request was made: done", cluster.MigrateRequest{To: "kafka", At: sealed.Last().Created.Add(-time.Second)}, assigned(4, cluster.Assigned), true, sealed, true, migrateStep{kind: stepDone}},
		{"on To before the request: refused", cluster.MigrateRequest{To: "kafka", At: sealed.Last().Created.Add(time.Second)}, assigned(4, cluster.Assigned), true, sealed, true,
			migrateStep{kind: stepRefuse, note: "the channel is on backend kafka already (segment 1, since term 4)"}},
		{"a term that cannot grow: refused", toKafka, assigned(math.MaxInt64, cluster.Assigned), true, onLocal, true,
			migrateStep{kind: stepRefuse, note: "the channel's term 9223372036854775807 cannot grow"}},
	}
	for _, tc := range cases {
		got := planMigration(tc.req, tc.a, tc.assigned, tc.c, tc.found)
		require.Equal(t, tc.want, got, tc.name)
	}
}
