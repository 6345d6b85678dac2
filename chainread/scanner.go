package chainread

import (
	"context"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
)

// errStopped is what run's loops return once the scanner was stopped: its
// Run's reason says why it ended (nil after Close).
var errStopped = errors.New("chainread: scanner stopped")

// scanner is a chain scanner. Its goroutine (run) owns everything but the
// Run and the output channels' receiving ends.
type scanner struct {
	*lifecycle.Run
	r   *Reader
	opt ReadOption
	log *slog.Logger

	// One of them is set: out for Read, batches for ReadBatches.
	out     chan message.Immutable
	batches chan []message.Immutable

	// Owned by run.
	chain  chain.Chain // the chain as the scanner knows it: Read's, then what Follow told
	lastTT uint64      // the highest timetick delivered
	// lc caches the last resume position wrapped: consecutive messages
	// often share it, and wrapping allocates.
	lcIn, lcOut message.ID
	// followErr is the last Follow error logged, so that a store that
	// stays unreachable is logged once, not once per interval.
	followErr string
}

var (
	_ walimpls.Scanner      = (*scanner)(nil)
	_ walimpls.BatchScanner = (*scanner)(nil)
)

func (s *scanner) Chan() <-chan message.Immutable      { return s.out }
func (s *scanner) Batches() <-chan []message.Immutable { return s.batches }

// segmentStart is where a segment's adaptor scanner starts and what it
// filters.
type segmentStart struct {
	policy cursor.Policy
	filter adaptor.Filter
}

// segmentScan is one segment being read: its WAL (read-only) and the
// adaptor scanner over it, started at start.
type segmentScan struct {
	seg   chain.Segment
	wal   adaptor.WAL // nil when reading through Config.Writer
	in    walimpls.BatchScanner
	start segmentStart
}

func (ss *segmentScan) close() {
	_ = ss.in.Close()
	if ss.wal != nil {
		_ = ss.wal.Close()
	}
}

// chanBuffer is how many messages a Read scanner's channel holds. The
// scanner's goroutine relays slices of the segment's scanner to the
// consumer one message at a time; unbuffered, every message was a
// goroutine hand-off on top of the adaptor's own, and a message-by-message
// scan of a chain cost 0.78 of the adaptor's CPU per message (0.95 with the
// buffer, BenchmarkScanAcrossSeal). It holds back at most this many
// messages beyond the segment scanner's budget.
const chanBuffer = 64

func (r *Reader) start(ctx context.Context, opt ReadOption, batches bool) (*scanner, error) {
	c := r.cfg.Chain
	if r.cfg.Follow != nil && startsLater(c, opt.DeliverPolicy) {
		now, err := r.cfg.Follow(ctx)
		if err == nil {
			err = now.Validate()
		}
		if err != nil {
			return nil, errors.Wrapf(err, "chainread: read %s: follow the chain", c.Channel)
		}
		if now.Channel != c.Channel {
			return nil, errors.Wrapf(ErrChainChanged, "chainread: read %s: Follow returned the chain of %s", c.Channel, now.Channel)
		}
		c = now
	}
	first, err := firstSegment(c, opt.DeliverPolicy)
	if err != nil {
		return nil, errors.Wrapf(err, "chainread: read %s", c.Channel)
	}
	s := &scanner{r: r, opt: opt, chain: c, log: r.log}
	if opt.Name != "" {
		s.log = s.log.With("scanner", opt.Name)
	}
	seg, _ := c.Segment(first)
	ss, err := s.open(ctx, seg, true, nil)
	if err != nil {
		return nil, err
	}
	if batches {
		s.batches = make(chan []message.Immutable)
	} else {
		s.out = make(chan message.Immutable, chanBuffer)
	}
	s.Run = lifecycle.NewRun()
	go s.run(first, ss)
	return s, nil
}

// startsLater reports whether a scanner of policy p must start on the chain
// as it is now, not c, the Reader's: cursor.Latest (segments sealed since
// c hold nothing "latest"), and a start in a segment after c's last (one
// added since). Pure logic.
func startsLater(c chain.Chain, p cursor.Policy) bool {
	if p.IsLatest() {
		return true
	}
	pos, ok := startPosition(p)
	return ok && pos.Segment > c.Last().Index
}

// open opens segment seg for reading: its WAL, read-only (or the Reader's
// Writer, for its last segment unsealed), and a scanner from restart when
// set, else from where the policy starts (first) or from its beginning.
// It returns nil for a sealed segment that delivers nothing.
func (s *scanner) open(ctx context.Context, seg chain.Segment, first bool, restart *segmentStart) (ss *segmentScan, err error) {
	defer func() {
		if err != nil {
			err = errors.Wrapf(err, "chainread: chain %s: segment %d on %s", s.chain.Channel, seg.Index, seg.Backend)
		}
	}()
	if seg.Seal != nil && seg.Seal.End == "" {
		return nil, nil
	}
	opener, err := s.r.cfg.Openers.Opener(seg.Backend)
	if err != nil {
		return nil, err
	}
	var start segmentStart
	if restart != nil {
		start = *restart
	} else if start, err = s.segmentStart(opener, first); err != nil {
		return nil, err
	}
	// The writer of the Reader's last segment reads that segment while it
	// is unsealed; not one learned of later.
	writer := s.r.cfg.Writer
	if seg.Seal != nil || seg.Index != s.r.cfg.Chain.Last().Index {
		writer = nil
	}
	// A scanner that may learn this segment's seal, and restart it, must
	// know where "latest" was: right after the last message stored now.
	latest := seg.Seal == nil && restart == nil && first && s.opt.DeliverPolicy.IsLatest() && s.r.cfg.Follow != nil
	if writer != nil && !latest {
		return s.readWriter(ctx, writer, seg, start)
	}
	raw, err := opener.Open(ctx, walimpls.Channel{Name: seg.Backend.Channel, Term: seg.FirstTerm, Mode: walimpls.ReadOnly})
	if err != nil {
		if seg.Seal != nil && errors.Is(err, walimpls.ErrNoChannel) {
			// A sealed segment's channel existed: its data is gone.
			err = errmark.Mark(errors.Wrap(err, "the sealed segment's data is gone"), walimpls.ErrPositionGone)
		}
		return nil, err
	}
	var until message.ID
	switch {
	case seg.Seal != nil:
		until, err = sealEnd(ctx, opener, raw, seg)
	case latest:
		start.policy, err = latestStart(ctx, raw)
	}
	if err != nil || writer != nil {
		// With a writer, raw was opened only to read where its log ends.
		_ = raw.Close()
		if err != nil {
			return nil, err
		}
		return s.readWriter(ctx, writer, seg, start)
	}
	pre := &preopened{Opener: opener, impl: raw}
	w, err := adaptor.Open(ctx, pre, adaptor.Channel{Name: seg.Backend.Channel, Term: seg.FirstTerm}, s.r.cfg.Options)
	if err != nil {
		if !pre.used {
			_ = raw.Close()
		}
		return nil, err
	}
	in, err := w.ReadBatches(ctx, adaptor.ReadOption{Name: s.opt.Name, DeliverPolicy: start.policy, Filter: start.filter, Until: until})
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return &segmentScan{seg: seg, wal: w, in: in, start: start}, nil
}

// readWriter reads segment seg, the last, through its writer w
// (Config.Writer) from start.
func (s *scanner) readWriter(ctx context.Context, w adaptor.WAL, seg chain.Segment, start segmentStart) (*segmentScan, error) {
	in, err := w.ReadBatches(ctx, adaptor.ReadOption{Name: s.opt.Name, DeliverPolicy: start.policy, Filter: start.filter})
	if err != nil {
		return nil, err
	}
	return &segmentScan{seg: seg, in: in, start: start}, nil
}

// segmentStart decides where the scanner's policy starts in a segment of
// opener's backend (first: the segment where the scanner starts).
func (s *scanner) segmentStart(opener walimpls.Opener, first bool) (segmentStart, error) {
	policy, filter, err := segmentPolicy(s.opt.DeliverPolicy, s.opt.Filter, first, func(id string) (message.ID, error) {
		bid, err := opener.UnmarshalID(id)
		if err != nil {
			return message.ID{}, errors.Wrapf(err, "start %s", s.opt.DeliverPolicy)
		}
		return bid, nil
	})
	return segmentStart{policy: policy, filter: filter}, err
}

// latestStart is cursor.Latest as a position: right after the last message
// raw holds, or its beginning when it holds none.
func latestStart(ctx context.Context, raw walimpls.WALImpl) (cursor.Policy, error) {
	last, err := raw.Last(ctx)
	if err != nil {
		return cursor.Policy{}, errors.Wrap(err, "the end of the last segment's log")
	}
	if last.IsZero() {
		return cursor.All(), nil
	}
	return cursor.StartAfter(last), nil
}

// sealEnd decodes a sealed segment's End and checks that its backend
// still holds it: a segment whose data was deleted (or lost) is
// walimpls.ErrPositionGone, never a wait for a message that will not come.
func sealEnd(ctx context.Context, opener walimpls.Opener, raw walimpls.WALImpl, seg chain.Segment) (message.ID, error) {
	end, err := opener.UnmarshalID(seg.Seal.End)
	if err != nil {
		return message.ID{}, errors.Wrapf(err, "seal end %q", seg.Seal.End)
	}
	last, err := raw.Last(ctx)
	if err != nil {
		return message.ID{}, errors.Wrap(err, "the end of the sealed segment's log")
	}
	if last.IsZero() || last.LT(end) {
		lastText := "nothing"
		if !last.IsZero() {
			lastText = last.Marshal()
		}
		return message.ID{}, errors.Wrapf(walimpls.ErrPositionGone,
			"the backend holds %s, the seal ends at %s: the segment's data is gone", lastText, seg.Seal.End)
	}
	return end, nil
}

// preopened is an Opener whose Open hands over a WAL opened already: the
// scanner reads the sealed segment's Last on it before the adaptor opens
// it, and the segment is opened once.
type preopened struct {
	walimpls.Opener
	impl walimpls.WALImpl
	used bool
}

func (p *preopened) Open(context.Context, walimpls.Channel) (walimpls.WALImpl, error) {
	if p.used {
		return nil, errors.AssertionFailedf("chainread: a preopened WAL opened twice")
	}
	p.used = true
	return p.impl, nil
}

// run is the scanner's goroutine: it reads the segments from first on,
// one open at a time, until it is stopped or fails.
func (s *scanner) run(first uint64, ss *segmentScan) {
	err := s.readSegments(first, ss)
	if errors.Is(err, errStopped) {
		err = nil // the stop's reason
	}
	s.End(err)
	if s.batches != nil {
		close(s.batches)
	} else {
		close(s.out)
	}
}

func (s *scanner) readSegments(first uint64, ss *segmentScan) error {
	if prev, ok := s.chain.Segment(first - 1); ok && first > 0 {
		s.lastTT = prev.Seal.TimeTick
	}
	for i := first; ; i++ {
		// s.chain may be a later chain than the last round's: one whose
		// segment i-1 the scanner learned sealed.
		seg, ok := s.chain.Segment(i)
		if !ok {
			// Validate makes the last segment unsealed: not reached.
			return errors.AssertionFailedf("chainread: chain %s has no segment %d after a sealed one", s.chain.Channel, i)
		}
		if i != first {
			var err error
			if ss, err = s.open(s.Context(), seg, false, nil); err != nil {
				if s.Stopped() {
					return errStopped
				}
				return err
			}
		}
		seg, err := s.readSegment(seg, ss)
		if err != nil {
			return err
		}
		// The next segment's timeticks are above the seal's (its writer's
		// floor), whatever this one delivered.
		s.lastTT = max(s.lastTT, seg.Seal.TimeTick)
	}
}

// readSegment delivers segment seg, which ss reads (nil: a sealed segment
// that delivers nothing), and closes ss. It returns the segment sealed:
// seg, or the last segment sealed while the scanner followed it (Follow);
// an unsealed one is read until its scanner ends, which is an error.
func (s *scanner) readSegment(seg chain.Segment, ss *segmentScan) (chain.Segment, error) {
	if ss == nil {
		return seg, nil
	}
	if seg.Seal != nil || s.r.cfg.Follow == nil {
		_, err := s.drain(ss, nil, nil)
		ss.close()
		if err == nil && seg.Seal == nil {
			err = errors.Wrapf(walimpls.ErrClosed, "chainread: chain %s: the scanner of the last segment %d ended", s.chain.Channel, seg.Index)
		}
		return seg, err
	}
	sealed, restart, err := s.followLive(ss)
	if err != nil {
		return seg, err
	}
	// Read the rest of the segment, up to its End, from right after what
	// was delivered.
	if ss, err = s.open(s.Context(), sealed, false, &restart); err != nil {
		if s.Stopped() {
			return seg, errStopped
		}
		return seg, err
	}
	return s.readSegment(sealed, ss)
}

// errTick is what drain returns when its tick fired.
var errTick = errors.New("chainread: follow tick")

// drain hands the consumer what segment ss delivers, until its scanner
// ends (ended, with its error: nil for a sealed segment read to its End)
// or tick fires (errTick), or it fails. live, when set, records what was
// delivered of a segment followed live.
func (s *scanner) drain(ss *segmentScan, tick <-chan time.Time, live *liveRead) (ended bool, err error) {
	stop := s.Stopping()
	for {
		var batch []message.Immutable
		var ok bool
		select {
		case batch, ok = <-ss.in.Batches():
		case <-tick:
			return false, errTick
		case <-stop:
			return false, errStopped
		}
		if !ok {
			if err := ss.in.Error(); err != nil {
				return true, errors.Wrapf(err, "chainread: chain %s: segment %d", s.chain.Channel, ss.seg.Index)
			}
			return true, nil
		}
		n, err := s.wrap(ss.seg, batch)
		if n > 0 {
			if live != nil {
				live.delivered(batch[:n])
			}
			if !s.send(batch[:n]) {
				return false, errStopped
			}
		}
		if err != nil {
			return false, err
		}
	}
}

// wrap turns the IDs of a batch of segment seg into chain IDs (their
// values allocated at once) and checks the timeticks. It returns how many
// messages may be delivered: all, or those before the first whose
// timetick breaks the order, with ErrTimeTickOrder.
//
// Within a segment the adaptor's scanner delivers timeticks in increasing
// order, so the batch's first timetick is checked against what came
// before it (the previous batch, the previous seal) and, in a sealed
// segment, its last against the seal; the messages between are checked
// only when one of those checks fails, to find the first to hold back.
func (s *scanner) wrap(seg chain.Segment, batch []message.Immutable) (int, error) {
	if first, last, ok := batchTimeTicks(batch); ok {
		if first <= s.lastTT || seg.Seal != nil && last > seg.Seal.TimeTick {
			for i, m := range batch {
				tt, ok := m.TimeTick()
				if !ok {
					continue
				}
				if tt <= s.lastTT || seg.Seal != nil && tt > seg.Seal.TimeTick {
					return s.wrapIDs(seg, batch[:i]), s.orderError(seg, m, tt)
				}
				s.lastTT = tt
			}
		}
		s.lastTT = last
	}
	return s.wrapIDs(seg, batch), nil
}

// batchTimeTicks returns the first and last timeticks of a batch; ok is
// false when no message of it has one.
func batchTimeTicks(batch []message.Immutable) (first, last uint64, ok bool) {
	for _, m := range batch {
		if first, ok = m.TimeTick(); ok {
			break
		}
	}
	if !ok {
		return 0, 0, false
	}
	for i := len(batch) - 1; i >= 0; i-- {
		if tt, has := batch[i].TimeTick(); has {
			return first, tt, true
		}
	}
	return first, first, true
}

// wrapIDs gives the messages of batch their chain IDs and resume
// positions, and returns len(batch).
func (s *scanner) wrapIDs(seg chain.Segment, batch []message.Immutable) int {
	// The messages' IDs, then the resume positions that differ from the
	// one before them.
	values := make([]cursor.ChainIDValue, len(batch), 2*len(batch))
	for i, m := range batch {
		lc := m.LastConfirmed()
		switch {
		case lc.IsZero():
		case !s.lcIn.IsZero() && lc.EQ(s.lcIn):
			lc = s.lcOut
		default:
			values = append(values, cursor.ChainIDValue{Segment: seg.Index, BackendID: lc})
			s.lcIn, s.lcOut = lc, message.NewID(&values[len(values)-1])
			lc = s.lcOut
		}
		values[i] = cursor.ChainIDValue{Segment: seg.Index, BackendID: m.ID()}
		batch[i] = message.NewImmutable(m.Message, message.NewID(&values[i])).WithLastConfirmed(lc)
	}
	return len(batch)
}

func (s *scanner) orderError(seg chain.Segment, m message.Immutable, tt uint64) error {
	c := s.chain
	if tt <= s.lastTT {
		return errors.Wrapf(ErrTimeTickOrder,
			"chainread: chain %s: segment %d's message %s has timetick %d, at or below %d delivered before it or recorded by the previous seal (did the segment's writer take the seal's timetick as its floor?)",
			c.Channel, seg.Index, m.ID().Marshal(), tt, s.lastTT)
	}
	return errors.Wrapf(ErrTimeTickOrder,
		"chainread: chain %s: segment %d's message %s has timetick %d, above its seal's %d",
		c.Channel, seg.Index, m.ID().Marshal(), tt, seg.Seal.TimeTick)
}

// send hands a batch to the consumer; false when the scanner was stopped
// first.
func (s *scanner) send(batch []message.Immutable) bool {
	stop := s.Stopping()
	if s.batches != nil {
		select {
		case s.batches <- batch:
			return true
		case <-stop:
			return false
		}
	}
	for _, m := range batch {
		select {
		case s.out <- m:
			continue
		default:
		}
		select {
		case s.out <- m:
		case <-stop:
			return false
		}
	}
	return true
}
