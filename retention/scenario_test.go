package retention

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/scenario"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/hlc"
)

// TestScenarios runs the stories in testdata/*.txt against the prune
// rule (decide) over a ledger of a log written by the story; see
// testdata/README.md for the commands, and go test -run TestScenarios
// -rewrite to regenerate their output.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata", func(t *testing.T) scenario.Handler {
		s := &pruneScenario{
			clock:     scenario.NewClock(),
			ledger:    newLedger(Policy{}, blockBounds{messages: 10, bytes: 1 << 40}),
			consumers: map[consumers.Scope]cursor.Checkpoint{},
		}
		return s.run
	})
}

// pruneScenario is one story of one channel: its log as the ledger knows
// it (message N is written N ms after the epoch, at position N), the
// consumers' resume points, the policy and the clock.
type pruneScenario struct {
	clock     *scenario.Clock
	ledger    *ledger
	consumers map[consumers.Scope]cursor.Checkpoint
	policy    Policy
	written   int64 // the last position written
}

// Positions and timeticks of the scenarios' log: message N at position N
// with the timetick of N ms after the epoch.
func scenarioTT(seq int64) uint64 {
	return hlc.Compose(scenario.Epoch.Add(time.Duration(seq)*time.Millisecond), 0)
}

func scenarioAt(seq int64) cursor.Checkpoint {
	return cursor.Checkpoint{Position: id(seq), TimeTick: scenarioTT(seq)}
}

func (s *pruneScenario) run(t *testing.T, d *datadriven.TestData) string {
	a := scenario.ArgsOf(t, d)
	var out []string
	switch d.Cmd {
	case "write":
		// Messages from..to (to defaults to from) of vchannel (none
		// without), each of size bytes; the tail follows.
		from := a.MustInt("from")
		to := a.Int("to", from)
		if from <= s.written || to < from {
			d.Fatalf(t, "write: positions go up from %d", s.written+1)
		}
		v := a.String("vchannel", "")
		size := a.Int("size", 100)
		overhead := int64(payloadMessage(t, 0, v).Stamp(message.KindData, 1, scenarioTT(from)).Size())
		if size < overhead {
			d.Fatalf(t, "write: a message of vchannel %q weighs %d bytes at least", v, overhead)
		}
		tail := scenarioAt(to)
		for seq := from; seq <= to; seq++ {
			m := payloadMessage(t, int(size-overhead), v).Stamp(message.KindData, 1, scenarioTT(seq))
			s.ledger.note(message.NewImmutable(m, id(seq)), tail)
		}
		s.written = to
		s.ledger.at, s.ledger.tail, s.ledger.complete = tail, tail, true
	case "tail":
		// The log's tail moves past the data written (timeticks only).
		at := a.MustInt("at")
		if at < s.written {
			d.Fatalf(t, "tail: at %d already", s.written)
		}
		s.written = at
		s.ledger.at, s.ledger.tail = scenarioAt(at), scenarioAt(at)
	case "commit":
		// A consumer's checkpoint: it processed everything up to at.
		sc := consumers.Scope{Consumer: a.String("consumer", ""), VChannel: a.String("vchannel", "")}
		s.consumers[sc] = scenarioAt(a.MustInt("at"))
	case "policy":
		s.policy = Policy{MaxAge: a.Duration("max-age", 0), MaxBytes: a.Int("max-bytes", 0)}
	case "tick":
		s.clock.Tick(t, d, a.Word())
		out = append(out, scenario.Since(s.clock.Now()))
	case "decide", "prune":
		dec, err := decide(s.input())
		if err != nil {
			out = append(out, "error: "+err.Error())
			break
		}
		s.check(t, d, dec)
		out = append(out, s.decision(dec)...)
		if d.Cmd == "prune" {
			out = append(out, s.prune(dec)...)
		}
	case "log":
		out = s.log()
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	a.Done()
	return scenario.Lines(out)
}

// input is what the retainer would hand decide: consumers in a fixed
// order, so that ties print the same every run.
func (s *pruneScenario) input() input {
	in := input{now: s.clock.Now(), tail: s.ledger.tail, vchannels: s.ledger.vchannels, blocks: s.ledger.blocks, policy: s.policy}
	for _, sc := range s.scopes() {
		in.consumers = append(in.consumers, consumer{scope: sc, resume: s.consumers[sc]})
	}
	return in
}

func (s *pruneScenario) scopes() []consumers.Scope {
	byName := map[string]consumers.Scope{}
	for sc := range s.consumers {
		byName[sc.String()] = sc
	}
	var out []consumers.Scope
	for _, k := range scenario.Sorted(byName) {
		out = append(out, byName[k])
	}
	return out
}

// check fails the story if the decision would drop what a consumer has
// not processed: the target passes no consumer's resume point, except
// an idle vchannel consumer's, which is moved to the tail and has nothing
// of its vchannel between its point and the tail.
func (s *pruneScenario) check(t *testing.T, d *datadriven.TestData, dec decision) {
	t.Helper()
	moved := map[consumers.Scope]bool{}
	for _, m := range dec.moves {
		moved[m.Scope] = true
	}
	for sc, resume := range s.consumers {
		if !resume.Position.LT(dec.target.Position) {
			continue
		}
		v := s.ledger.vchannels[sc.VChannel]
		if !moved[sc] || sc.VChannel == "" || (v != nil && v.lastTT > resume.TimeTick) {
			d.Fatalf(t, "the target %s passes the resume point %s of %s", cp(dec.target), cp(resume), sc)
		}
	}
}

func (s *pruneScenario) decision(dec decision) []string {
	var out []string
	switch dec.heldBy {
	case "":
		out = append(out, fmt.Sprintf("keep from %s: nothing holds the log, the tail", cp(dec.target)))
	default:
		out = append(out, fmt.Sprintf("keep from %s, held by %q", cp(dec.target), dec.heldBy))
	}
	for _, sc := range dec.holding {
		out = append(out, "  holding: "+sc.String())
	}
	for _, m := range dec.moves {
		out = append(out, fmt.Sprintf("  move %s to the tail %s", m.Scope, cp(m.Resume)))
	}
	if !dec.kept.IsZero() {
		out = append(out, fmt.Sprintf("  the policy drops what nobody committed on: it would be kept from %s", pos(dec.kept)))
	}
	return out
}

// prune does what the retainer does with a decision: the moves, then the
// truncation at the target, which the ledger forgets.
func (s *pruneScenario) prune(dec decision) []string {
	for _, m := range dec.moves {
		s.consumers[m.Scope] = m.Resume
	}
	if len(s.ledger.blocks) == 0 || !s.ledger.blocks[0].first.LT(dec.target.Position) {
		return []string{"nothing to truncate"}
	}
	out := fmt.Sprintf("truncated before %s", pos(dec.target.Position))
	if !dec.kept.IsZero() {
		dropped := droppedPast(dec.kept, s.ledger.blocks, dec.target.Position)
		out += fmt.Sprintf(", the policy dropped %d messages (%d bytes)", dropped[0], dropped[1])
	}
	messages, bytes := s.ledger.truncated(dec.target.Position)
	return []string{out, fmt.Sprintf("the ledger forgot %d messages (%d bytes)", messages, bytes)}
}

// log prints the log as the ledger knows it, and the consumers.
func (s *pruneScenario) log() []string {
	l := s.ledger
	messages, bytes, _ := l.totals()
	out := []string{fmt.Sprintf("tail %s; %d messages, %d bytes in %d blocks", cp(l.tail), messages, bytes, len(l.blocks))}
	for _, b := range l.blocks {
		out = append(out, fmt.Sprintf("  block %s..%s: %d messages, %d bytes, written %s..%s",
			pos(b.first), pos(b.last), b.messages, b.bytes, since(b.firstTT), since(b.lastTT)))
	}
	for _, name := range sortedKeys(l.vchannels) {
		v := l.vchannels[name]
		if name == "" {
			name = "(none)"
		}
		out = append(out, fmt.Sprintf("  vchannel %s: %s..%s", name, pos(v.first), pos(v.last)))
	}
	for _, sc := range s.scopes() {
		out = append(out, fmt.Sprintf("  %s at %s", sc, cp(s.consumers[sc])))
	}
	return out
}

// pos prints a position of the scenario's log by its number.
func pos(p message.ID) string {
	seq, err := message.SeqOf("test", p)
	if err != nil {
		return p.String()
	}
	return fmt.Sprint(seq)
}

// cp prints a checkpoint: N after message N was read, "before N" when
// message N is the next to read.
func cp(c cursor.Checkpoint) string {
	seq, err := message.SeqOf("test", c.Position)
	switch {
	case err != nil:
		return c.String()
	case c.TimeTick == scenarioTT(seq):
		return fmt.Sprint(seq)
	case c.TimeTick == before(scenarioTT(seq)):
		return fmt.Sprintf("before %d", seq)
	}
	return fmt.Sprintf("%d (timetick %s)", seq, since(c.TimeTick))
}

func since(tt uint64) string { return scenario.Since(hlc.Physical(tt).UTC()) }
