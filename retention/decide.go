package retention

import (
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/hlc"
)

// consumer is one consumer as the rule sees it: where it resumes (its own
// checkpoint, or a resume point recorded for it when that is later).
type consumer struct {
	scope  consumers.Scope
	resume cursor.Checkpoint
}

// input is what decide decides on.
type input struct {
	now       time.Time
	tail      cursor.Checkpoint // the ledger's: how far the log was read
	consumers []consumer
	vchannels map[string]*written
	blocks    []block
	policy    Policy
}

// Holder kinds, the start of Stats.HeldBy.
const (
	heldNoConsumer = "no consumer"
	heldRetention  = "retention"
)

// decision is what decide found.
type decision struct {
	// target is where the log may be truncated: every hold is at or after
	// it.
	target cursor.Checkpoint
	// heldBy says who holds the log back at target ("" when nothing does:
	// target is the tail).
	heldBy string
	// holding are the consumers whose resume point is target.
	holding []consumers.Scope
	// moves are the idle vchannel consumers target passes: they resume at
	// the tail.
	moves []consumers.Move
	// kept is where the log would be kept from without the policy (the
	// earliest hold of a consumer or of what no consumer committed on);
	// past it, the policy drops. Zero when the policy drops nothing.
	kept message.ID
}

// decide applies the package's rule. Pure: no locks, no I/O.
func decide(in input) (decision, error) {
	d := decision{target: in.tail}
	if in.tail.IsZero() {
		return decision{}, errors.New("retention: decide before the log was read")
	}
	// explicit: the earliest hold of a committed checkpoint.
	var explicit cursor.Checkpoint
	var explicitBy string
	var explicitScopes []consumers.Scope
	hold := func(at cursor.Checkpoint, by string, sc consumers.Scope) error {
		if explicit.IsZero() {
			explicit, explicitBy, explicitScopes = at, by, []consumers.Scope{sc}
			return nil
		}
		n, err := at.Position.Compare(explicit.Position)
		if err != nil {
			return errors.Wrapf(err, "retention: %s", sc)
		}
		switch {
		case n < 0:
			explicit, explicitBy, explicitScopes = at, by, []consumers.Scope{sc}
		case n == 0:
			explicitScopes = append(explicitScopes, sc)
		}
		return nil
	}
	channelConsumer := false
	covered := map[string]bool{}
	var idle []consumer
	for _, c := range in.consumers {
		if c.scope.VChannel == "" {
			channelConsumer = true
			if err := hold(c.resume, c.scope.String(), c.scope); err != nil {
				return decision{}, err
			}
			continue
		}
		covered[c.scope.VChannel] = true
		v := in.vchannels[c.scope.VChannel]
		switch {
		case v != nil && v.lastTT > c.resume.TimeTick, c.resume.TimeTick >= in.tail.TimeTick:
			// Messages of its vchannel after its checkpoint; or it is at or
			// past the tail already, where its own point is the later one.
			if err := hold(c.resume, c.scope.String(), c.scope); err != nil {
				return decision{}, err
			}
		default:
			idle = append(idle, c)
		}
	}

	// implicit: what no consumer committed on, kept until the policy drops
	// it.
	var implicit message.ID
	var implicitBy string
	keep := func(at message.ID, by string) {
		if implicit.IsZero() || at.LT(implicit) {
			implicit, implicitBy = at, by
		}
	}
	switch {
	case len(in.consumers) == 0 && len(in.blocks) > 0:
		keep(in.blocks[0].first, heldNoConsumer)
	case !channelConsumer:
		for _, name := range sortedKeys(in.vchannels) {
			if covered[name] {
				continue
			}
			by := "vchannel " + name + " (no consumer)"
			if name == "" {
				by = "messages without a vchannel (no consumer of the channel)"
			}
			keep(in.vchannels[name].first, by)
		}
	}
	if !implicit.IsZero() {
		if cut, ok := policyCut(in); ok && implicit.LT(cut.Position) {
			d.kept = implicit
			implicit, implicitBy = cut.Position, heldRetention
		}
	}

	// The earliest of the holds; the tail when none.
	switch {
	case !explicit.IsZero() && (implicit.IsZero() || explicit.Position.LTE(implicit)):
		d.target, d.heldBy, d.holding = explicit, explicitBy, explicitScopes
	case !implicit.IsZero():
		d.target, d.heldBy = checkpointAt(implicit, in), implicitBy
	}
	if d.heldBy != heldRetention {
		d.kept = message.ID{}
	}
	for _, c := range idle {
		if c.resume.Position.LT(d.target.Position) {
			d.moves = append(d.moves, consumers.Move{Scope: c.scope, Resume: in.tail})
		}
	}
	return d, nil
}

// policyCut is where the policy lets the log go from, on the ledger's
// blocks: the first block it keeps (the tail when it keeps none). False
// when the policy caps nothing there.
func policyCut(in input) (cursor.Checkpoint, bool) {
	p := in.policy
	if p.IsZero() || len(in.blocks) == 0 {
		return cursor.Checkpoint{}, false
	}
	drop := 0 // the blocks before this one go
	if p.MaxAge > 0 {
		cutoff := in.now.Add(-p.MaxAge)
		for drop < len(in.blocks) && hlc.Physical(in.blocks[drop].lastTT).Before(cutoff) {
			drop++
		}
	}
	if p.MaxBytes > 0 {
		var kept int64
		i := len(in.blocks)
		for i > 0 && kept+in.blocks[i-1].bytes <= p.MaxBytes {
			kept += in.blocks[i-1].bytes
			i--
		}
		drop = max(drop, i)
	}
	switch {
	case drop == 0:
		return cursor.Checkpoint{}, false
	case drop == len(in.blocks):
		return in.tail, true
	}
	b := in.blocks[drop]
	return cursor.Checkpoint{Position: b.first, TimeTick: before(b.firstTT)}, true
}

// checkpointAt is a checkpoint at position at: with the timetick of the
// block that starts there when one does, so that it reads back.
func checkpointAt(at message.ID, in input) cursor.Checkpoint {
	if at.EQ(in.tail.Position) {
		return in.tail
	}
	for _, b := range in.blocks {
		if b.first.EQ(at) {
			return cursor.Checkpoint{Position: at, TimeTick: before(b.firstTT)}
		}
	}
	for _, v := range in.vchannels {
		if v.first.EQ(at) && v.firstTT > 0 {
			return cursor.Checkpoint{Position: at, TimeTick: before(v.firstTT)}
		}
	}
	return cursor.Checkpoint{Position: at, TimeTick: 1}
}

// before is the timetick just below tt (a checkpoint after which the
// message at tt is read).
func before(tt uint64) uint64 { return max(1, tt-1) }

func sortedKeys(m map[string]*written) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (d decision) String() string {
	return fmt.Sprintf("target %s held by %q, %d moves", d.target, d.heldBy, len(d.moves))
}
