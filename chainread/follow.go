package chainread

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// liveRead is what a scanner delivered of the segment it follows live:
// where it restarts the segment once it learns the segment's seal.
type liveRead struct {
	// any: something of the segment was delivered.
	any bool
	// resume is the segment backend's resume position (LastConfirmed) of
	// the last message delivered that carried one; zero before.
	resume message.ID
}

// delivered records batch, a batch of the segment about to be delivered
// (its IDs wrapped already).
func (l *liveRead) delivered(batch []message.Immutable) {
	l.any = true
	for i := len(batch) - 1; i >= 0; i-- {
		if lc := batch[i].LastConfirmed(); !lc.IsZero() {
			if _, bid, ok := cursor.SplitID(lc); ok {
				l.resume = bid
			}
			return
		}
	}
}

// resumeStart decides where the scanner restarts a segment it followed
// live and learned sealed: right after what it delivered, that is at the
// resume position of the last message it delivered, above lastTT, the
// highest timetick it delivered (a cursor.Checkpoint: everything of the
// segment at or below lastTT was delivered, in timetick order); where it
// first started when it delivered nothing that carried a resume position
// (above lastTT when it delivered anything). Pure logic.
func resumeStart(first segmentStart, l liveRead, lastTT uint64) segmentStart {
	if !l.resume.IsZero() {
		return segmentStart{policy: cursor.After(cursor.Checkpoint{Position: l.resume, TimeTick: lastTT}), filter: first.filter}
	}
	if l.any {
		first.filter.TimeTickAbove = max(first.filter.TimeTickAbove, lastTT)
	}
	return first
}

// followed decides what got, a chain Follow returned (validated), says of
// seg, the segment the scanner follows live in cur: the segment as got
// records it (sealed or not), or why the scanner cannot go on: got drops
// the segment (walimpls.ErrPositionGone), or does not continue cur
// (ErrChainChanged). lastTT is the highest timetick the scanner delivered:
// above a seal's TimeTick, it delivered what the seal excludes
// (ErrTimeTickOrder). Pure logic.
func followed(cur, got chain.Chain, seg chain.Segment, lastTT uint64) (chain.Segment, error) {
	if got.Channel != cur.Channel {
		return chain.Segment{}, errors.Wrapf(ErrChainChanged, "Follow returned the chain of %s", got.Channel)
	}
	now, ok := got.Segment(seg.Index)
	switch {
	case !ok && seg.Index < got.First():
		return chain.Segment{}, errors.Wrapf(walimpls.ErrPositionGone,
			"the chain dropped segment %d, which the scanner was reading (it starts at segment %d now)", seg.Index, got.First())
	case !ok:
		return chain.Segment{}, errors.Wrapf(ErrChainChanged,
			"the chain ends at segment %d, before segment %d, which the scanner was reading (was it created again?)", got.Last().Index, seg.Index)
	case !now.Backend.Equal(seg.Backend) || now.FirstTerm != seg.FirstTerm:
		return chain.Segment{}, errors.Wrapf(ErrChainChanged,
			"segment %d is on %s from term %d now, not on %s from term %d, where the scanner was reading it (was the chain created again?)",
			seg.Index, now.Backend, now.FirstTerm, seg.Backend, seg.FirstTerm)
	case now.Seal != nil && lastTT > now.Seal.TimeTick:
		return chain.Segment{}, errors.Wrapf(ErrTimeTickOrder,
			"segment %d was %s, but the scanner had delivered timetick %d of it before it learned the seal: a writer the seal did not fence (a backend that cannot fence) wrote after the end",
			seg.Index, *now.Seal, lastTT)
	}
	return now, nil
}

// followLive delivers what ss, the adaptor scanner of the last segment
// the scanner knows, delivers, and asks Follow every FollowInterval (at
// once when ss ends) until the chain shows the segment sealed. It returns
// the sealed segment and where to restart it; ss is closed on return.
func (s *scanner) followLive(ss *segmentScan) (chain.Segment, segmentStart, error) {
	defer ss.close()
	var live liveRead
	interval := s.r.cfg.FollowInterval
	timer := s.r.cfg.Clock.NewTimer(interval)
	defer timer.Stop()
	for {
		ended, err := s.drain(ss, timer.Chan(), &live)
		if !ended && !errors.Is(err, errTick) {
			return chain.Segment{}, segmentStart{}, err
		}
		sealed, perr := s.poll(ss.seg)
		switch {
		case perr != nil:
			return chain.Segment{}, segmentStart{}, perr
		case sealed.Seal != nil:
			return sealed, resumeStart(ss.start, live, s.lastTT), nil
		case !ended:
			timer.Reset(interval)
			continue
		}
		// The segment's scanner ended and the chain does not show the
		// segment sealed. A fence is the first step of a migration (the
		// seal follows it): wait for the seal while one is pending.
		if err == nil {
			err = errors.Wrapf(walimpls.ErrClosed, "chainread: chain %s: the scanner of the last segment %d ended", s.chain.Channel, ss.seg.Index)
		}
		if !errors.Is(err, walimpls.ErrFenced) {
			return chain.Segment{}, segmentStart{}, err
		}
		for s.chain.Pending != nil && sealed.Seal == nil {
			timer.Reset(interval)
			select {
			case <-timer.Chan():
			case <-s.Stopping():
				return chain.Segment{}, segmentStart{}, errStopped
			}
			if sealed, perr = s.poll(ss.seg); perr != nil {
				return chain.Segment{}, segmentStart{}, perr
			}
		}
		if sealed.Seal == nil {
			return chain.Segment{}, segmentStart{}, err
		}
		return sealed, resumeStart(ss.start, live, s.lastTT), nil
	}
}

// poll asks Follow for the chain and returns seg as it records it; the
// chain becomes the scanner's when it continues the scanner's. A Follow
// that fails, or returns a chain that does not validate, is logged (once
// while it keeps failing alike) and seg is returned as it was: the next
// poll asks again. It fails when the scanner was stopped or cannot go on
// (see followed).
func (s *scanner) poll(seg chain.Segment) (chain.Segment, error) {
	got, err := s.r.cfg.Follow(s.Context())
	if err == nil {
		err = got.Validate()
	}
	switch {
	case s.Stopped():
		return chain.Segment{}, errStopped
	case err != nil:
		if text := err.Error(); text != s.followErr {
			s.followErr = text
			s.log.Warn("chainread: cannot learn the chain; asking again at the next interval",
				"segment", seg.Index, "error", err)
		}
		return seg, nil
	}
	if s.followErr != "" {
		s.followErr = ""
		s.log.Info("chainread: learns the chain again", "segment", seg.Index)
	}
	now, err := followed(s.chain, got, seg, s.lastTT)
	if err != nil {
		return chain.Segment{}, errors.Wrapf(err, "chainread: chain %s: follow", s.chain.Channel)
	}
	s.chain = got.Clone()
	if now.Seal != nil {
		s.log.Info("chainread: the followed segment was sealed; reading it to its end, then the next",
			"segment", now.Index, "seal", fmt.Sprint(*now.Seal), "next", s.chain.Last().Index)
	}
	return now, nil
}
