package coordinator

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/scenario"
)

// TestScenarios runs the stories in testdata/*.txt against the decision
// rules on a cluster held in memory (decideModel); see testdata/README.md
// for the commands, and go test -run TestScenarios -rewrite to regenerate
// their output.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata", func(t *testing.T) scenario.Handler {
		s := &decideScenario{m: newDecideModel(), clock: scenario.NewClock(), chains: map[string]chain.Chain{}}
		return s.run
	})
}

// decideScenario is one story: the cluster, the clock, the channels'
// chains, and the changes the last decide printed, which apply writes.
type decideScenario struct {
	m       *decideModel
	clock   *scenario.Clock
	chains  map[string]chain.Chain
	decided []change
}

func (s *decideScenario) run(t *testing.T, d *datadriven.TestData) string {
	a := scenario.ArgsOf(t, d)
	m := s.m
	var out []string
	switch d.Cmd {
	case "channels":
		m.channels = a.Words()
	case "nodes":
		for _, id := range a.Words() {
			m.snap.Nodes[id] = cluster.Versioned[cluster.NodeInfo]{Value: cluster.NodeInfo{ID: id}, Revision: m.next()}
		}
	case "node-lost":
		delete(m.snap.Nodes, a.Word())
		m.next()
	case "node-dead", "node-silent":
		id := a.Word()
		f := death{rev: m.snap.Nodes[id].Revision, at: s.clock.Now()}
		if d.Cmd == "node-dead" {
			m.health.dead[id] = f
		} else {
			m.health.silent[id] = f
		}
	case "node-heard":
		delete(m.health.silent, a.Word())
	case "node-suspect":
		id := a.Word()
		m.health.suspect[id] = m.snap.Nodes[id].Revision
	case "node-alive":
		delete(m.health.suspect, a.Word())
	case "drain":
		m.snap.Drains[a.Word()] = cluster.Versioned[cluster.DrainRequest]{Revision: m.next()}
	case "undrain":
		delete(m.snap.Drains, a.Word())
		m.next()
	case "assign":
		// Written as another leader would have: the channel's word, then
		// its owner, term and state.
		var ch string
		state := cluster.Assigning
		for _, w := range a.Words() {
			switch w {
			case string(cluster.Assigned), string(cluster.Assigning):
				state = cluster.State(w)
			default:
				ch = w
			}
		}
		term := int64(math.MaxInt64)
		if v := a.String("term", ""); v != "max" {
			term = a.MustInt("term")
		}
		as := cluster.Assignment{Channel: ch, Node: a.String("node", ""), Term: term, State: state, Since: s.clock.Now()}
		for _, o := range a.List("prev") {
			n, tm, _ := strings.Cut(o, "@")
			as.Previous = append(as.Previous, cluster.Owner{Node: n, Term: atoi(t, tm)})
		}
		m.snap.Assignments[ch] = cluster.Versioned[cluster.Assignment]{Value: as, Revision: m.next()}
	case "opened":
		ch := a.Word()
		o := cluster.Opened{Channel: ch, Node: a.String("node", ""), Term: a.MustInt("term"), Error: a.String("err", "")}
		m.snap.Opened[ch] = cluster.Versioned[cluster.Opened]{Value: o, Revision: m.next()}
	case "move":
		ch := a.Word()
		m.snap.Moves[ch] = cluster.Versioned[cluster.MoveRequest]{Value: cluster.MoveRequest{To: a.String("to", "")}, Revision: m.next()}
	case "migrate":
		ch := a.Word()
		req := cluster.MigrateRequest{To: a.String("to", ""), By: "ops", At: s.clock.Now()}
		m.snap.Migrations[ch] = cluster.Versioned[cluster.MigrateRequest]{Value: req, Revision: m.next()}
	case "migration":
		// What the chain step (migrate.go) found for a migrate request:
		// its intent's term, done, or refused with the reason in the input.
		w := a.Words()
		switch {
		case len(w) == 1 && a.Has("term"):
			m.migs[w[0]] = migration{term: a.MustInt("term")}
		case len(w) == 2 && w[1] == "done":
			m.migs[w[0]] = migration{done: true}
		case len(w) == 2 && w[1] == "refused":
			m.migs[w[0]] = migration{refusal: strings.TrimSpace(d.Input)}
		default:
			d.Fatalf(t, "migration CH term=T | migration CH done | migration CH refused (the reason below)")
		}
	case "chain":
		// A channel's chain, created now with one segment on backend.
		ch := a.Word()
		b := chain.Backend{Name: a.String("backend", ""), Kind: a.String("backend", ""), Channel: ch}
		s.chains[ch] = chain.Chain{Channel: ch, Segments: []chain.Segment{{Backend: b, Created: s.clock.Now()}}}
	case "plan":
		out = s.plan()
	case "seal":
		out = append(out, s.seal(t, d, a.Word()))
	case "chains":
		for _, ch := range scenario.Sorted(s.chains) {
			out = append(out, formatChain(s.chains[ch]))
		}
	case "tick":
		s.clock.Tick(t, d, a.Word())
		out = append(out, scenario.Since(s.clock.Now()))
	case "decide", "step":
		guards := a.Has("guards")
		m.now = s.clock.Now()
		s.decided = m.rules.decide(m.snap, m.health, m.channels, m.migs, m.now)
		for _, c := range s.decided {
			out = append(out, s.change(c, guards))
		}
		if len(out) == 0 {
			out = append(out, "no change")
		}
		if d.Cmd == "step" {
			for _, c := range s.decided {
				if why := s.refused(c); why != "" {
					d.Fatalf(t, "step: %s: a decision on a fresh snapshot must apply: %s", c.channel, why)
				}
				m.apply(t, c)
			}
			s.decided = nil
		}
	case "apply":
		// The doer writes what the last decide said, each change in a
		// transaction conditional on what the decision read.
		for _, c := range s.decided {
			if why := s.refused(c); why != "" {
				out = append(out, fmt.Sprintf("%s: not applied: %s", c.channel, why))
				continue
			}
			m.apply(t, c)
			out = append(out, c.channel+": applied")
		}
		s.decided = nil
	case "assignments":
		for _, ch := range scenario.Sorted(m.snap.Assignments) {
			out = append(out, s.assignment(ch))
		}
	case "requests":
		for _, ch := range scenario.Sorted(m.snap.Moves) {
			to := m.snap.Moves[ch].Value.To
			if to == "" {
				to = "any node"
			}
			out = append(out, fmt.Sprintf("move %s to %s", ch, to))
		}
		for _, ch := range scenario.Sorted(m.snap.Migrations) {
			r := m.snap.Migrations[ch].Value
			out = append(out, fmt.Sprintf("migrate %s to %s, term %d", ch, r.To, r.Term))
		}
		if len(out) == 0 {
			out = append(out, "none")
		}
	case "loads":
		d := newDecision(m.snap, m.health, m.rules, s.clock.Now())
		var loads []string
		for _, n := range d.live {
			loads = append(loads, fmt.Sprintf("%s=%d", n, d.load[n]))
		}
		out = append(out, "live: "+strings.Join(loads, " "))
	case "status":
		assigning, overdue := m.rules.status(m.snap, m.channels, s.clock.Now())
		out = append(out, fmt.Sprintf("assigning %d, overdue [%s]", assigning, strings.Join(overdue, " ")))
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	a.Done()
	return scenario.Lines(out)
}

// change prints a decided change, with the conditions its write carries
// when guards is set.
func (s *decideScenario) change(c change, guards bool) string {
	line := formatChange(c)
	if c.kind == changeAssign && !c.detected.IsZero() {
		line += " detected " + scenario.Since(c.detected)
	}
	if !guards {
		return line
	}
	var conds []string
	switch {
	case c.kind == changeAssign && c.rev == 0:
		conds = append(conds, "assignment absent")
	case c.kind == changeAssign, c.kind == changeConfirm:
		conds = append(conds, fmt.Sprintf("assignment@%d", c.rev))
	}
	if c.openedRev != 0 {
		conds = append(conds, fmt.Sprintf("opened@%d", c.openedRev))
	}
	if c.moveRev != 0 {
		conds = append(conds, fmt.Sprintf("move@%d", c.moveRev))
	}
	if c.migrateRev != 0 {
		conds = append(conds, fmt.Sprintf("migrate@%d", c.migrateRev))
	}
	for _, g := range c.guards {
		key := "node " + g.name
		if g.kind == guardDrain {
			key = "drain " + g.name
		}
		if g.rev == 0 {
			conds = append(conds, key+" absent")
		} else {
			conds = append(conds, fmt.Sprintf("%s@%d", key, g.rev))
		}
	}
	return line + "\n  if " + strings.Join(conds, ", ")
}

// refused says why the transaction of c would not apply now ("" when it
// would): a key it relies on is no longer at the revision decide read.
func (s *decideScenario) refused(c change) string {
	snap := s.m.snap
	var why []string
	check := func(what string, want, got int64) {
		if want != got {
			why = append(why, fmt.Sprintf("%s at revision %d, decided on %d", what, got, want))
		}
	}
	if c.kind == changeAssign || c.kind == changeConfirm {
		check("assignment", c.rev, snap.Assignments[c.channel].Revision)
	}
	if c.kind == changeConfirm {
		check("open report", c.openedRev, snap.Opened[c.channel].Revision)
	}
	if c.moveRev != 0 {
		check("move request", c.moveRev, snap.Moves[c.channel].Revision)
	}
	if c.migrateRev != 0 {
		check("migrate request", c.migrateRev, snap.Migrations[c.channel].Revision)
	}
	for _, g := range c.guards {
		if g.kind == guardNode {
			check("node "+g.name, g.rev, snap.Nodes[g.name].Revision)
		} else {
			check("drain "+g.name, g.rev, snap.Drains[g.name].Revision)
		}
	}
	return strings.Join(why, "; ")
}

func (s *decideScenario) assignment(ch string) string {
	a := s.m.snap.Assignments[ch].Value
	term := fmt.Sprint(a.Term)
	if a.Term == math.MaxInt64 {
		term = "max"
	}
	line := fmt.Sprintf("%s: %s@%s %s since %s", ch, a.Node, term, a.State, scenario.Since(a.Since))
	if len(a.Previous) > 0 {
		var prev []string
		for _, o := range a.Previous {
			prev = append(prev, fmt.Sprintf("%s@%d", o.Node, o.Term))
		}
		line += " prev=[" + strings.Join(prev, " ") + "]"
	}
	if !a.Detected.IsZero() {
		line += " detected " + scenario.Since(a.Detected)
	}
	return line
}

// plan is the chain step of a pass (migrate.go's migrations, without its
// etcd and chain store): planMigration for the migrate request of every
// managed channel, the chain's part done on the model's chains (an intent
// recorded, a stray one cancelled), and what decide is told.
func (s *decideScenario) plan() []string {
	var out []string
	for _, ch := range sortedUnique(s.m.channels) {
		r, ok := s.m.snap.Migrations[ch]
		if !ok {
			continue
		}
		a, assigned := s.m.snap.Assignments[ch]
		cur, found := s.chains[ch]
		step := planMigration(r.Value, a.Value, assigned, cur, found)
		line := fmt.Sprintf("%s: %s", ch, step.kind)
		var mig migration
		switch step.kind {
		case stepDone:
			mig.done = true
		case stepRefuse:
			mig.refusal = step.note
			line += ": " + step.note
		case stepDrive:
			mig.term = step.term
			line += fmt.Sprintf(": assign the channel at term %d", step.term)
		case stepCancel:
			cur.Pending = nil
			s.chains[ch] = cur
			mig.refusal = step.note
			line += fmt.Sprintf(": the intent at term %d on segment %d", step.term, step.segment)
			if step.note != "" {
				line += ", and refuse: " + step.note
			}
		case stepBegin:
			target := chain.Backend{Name: r.Value.To, Kind: r.Value.To, Channel: chainwal.SegmentChannel(ch, step.segment+1)}
			cur.Pending = &chain.Migration{Target: target, Term: step.term, By: r.Value.By, At: s.clock.Now()}
			s.chains[ch] = cur
			mig.term = step.term
			line += fmt.Sprintf(": record the intent to move to %s at term %d on segment %d", target, step.term, step.segment)
		}
		s.m.migs[ch] = mig
		out = append(out, line)
	}
	if len(out) == 0 {
		out = append(out, "no migrate request")
	}
	return out
}

// seal is the owner's open at a pending migration's term: it seals the
// last segment and opens the next on the target.
func (s *decideScenario) seal(t *testing.T, d *datadriven.TestData, ch string) string {
	c, ok := s.chains[ch]
	if !ok || c.Pending == nil {
		d.Fatalf(t, "seal: %s has no pending migration", ch)
	}
	p := *c.Pending
	if a := s.m.snap.Assignments[ch].Value; a.Term != p.Term {
		d.Fatalf(t, "seal: only the open at the intent's term %d seals; %s is assigned at %d", p.Term, ch, a.Term)
	}
	c = c.Clone()
	last := &c.Segments[len(c.Segments)-1]
	last.Seal = &chain.Seal{Term: p.Term, At: s.clock.Now()}
	c.Segments = append(c.Segments, chain.Segment{Index: last.Index + 1, Backend: p.Target, FirstTerm: p.Term, Created: s.clock.Now()})
	c.Pending = nil
	s.chains[ch] = c
	return formatChain(c)
}

func formatChain(c chain.Chain) string {
	var segs []string
	for _, sg := range c.Segments {
		seg := fmt.Sprintf("%d %s from term %d", sg.Index, sg.Backend, sg.FirstTerm)
		if sg.Seal != nil {
			seg += fmt.Sprintf(" sealed at %d", sg.Seal.Term)
		}
		segs = append(segs, "["+seg+"]")
	}
	line := c.Channel + ": " + strings.Join(segs, " ")
	if p := c.Pending; p != nil {
		line += fmt.Sprintf(" pending %s at term %d by %s", p.Target, p.Term, p.By)
	}
	return line
}
