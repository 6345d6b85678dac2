package node

import (
	"context"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// maxReadLast bounds ReadRequest.last: the messages a read holds until it
// reaches the tail.
const maxReadLast = 10000

// defaultReadBatch is the messages per response of a request without batch.
const defaultReadBatch = 64

// validateRead refuses what no node could serve.
func validateRead(r *streamwalv1.ReadRequest) error {
	if err := walimpls.ValidateChannelName(r.GetChannel()); err != nil {
		return err
	}
	if b := r.GetBatch(); b < 0 {
		return errors.Newf("batch %d is negative (0 takes the default, %d)", b, defaultReadBatch)
	}
	if l := r.GetLast(); l > maxReadLast {
		return errors.Newf("last %d exceeds %d", l, maxReadLast)
	}
	for i, vc := range r.GetVchannels() {
		if err := walimpls.ValidateChannelName(vc); err != nil {
			return errors.Wrapf(err, "vchannels[%d]", i)
		}
	}
	return nil
}

// Read streams a channel's messages from this node, following the tail
// until the client cancels (or until_caught_up is reached). The WAL the
// read started on ends when the channel gets a new term: the manager
// closes it as it opens the new one. On this node (a migration's term is
// assigned to the same owner) the read goes on with the new term's WAL
// after the last message it delivered (readFeed.pos), so that nothing is
// lost or delivered twice and the tail taken at the start stays its
// target; elsewhere, or without a newer WAL, the stream ends with an
// error that says why (nextWAL), never OK.
func (s *service) Read(ctx context.Context, req *connect.Request[streamwalv1.ReadRequest], stream *connect.ServerStream[streamwalv1.ReadResponse]) (err error) {
	defer func() { s.count("Read", err) }()
	r := req.Msg
	if err := validateRead(r); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	w, a, err := s.owned(ctx, r.GetChannel(), 0)
	if err != nil {
		return err
	}
	opt, start, err := readOption(w, r)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	f := &readFeed{batch: int(r.GetBatch()), last: int(r.GetLast()), untilCaughtUp: r.GetUntilCaughtUp(), pos: start, flagAt: -1}
	if f.batch == 0 {
		f.batch = defaultReadBatch
	}
	_, latest := r.GetStart().(*streamwalv1.ReadRequest_Latest)
	f.watching = f.untilCaughtUp || f.last > 0
	if f.watching || latest {
		// Where the log stands now: the end of what the read must catch
		// up with, and the start of a latest read (a checkpoint, so that
		// its first message has a position).
		tail, err := w.Tail(ctx)
		if err != nil {
			return s.appendError(r.GetChannel(), err)
		}
		f.tail = tail
		if latest {
			opt.DeliverPolicy, f.pos = cursor.After(tail), tail.Marshal()
		}
	}
	if latest && f.watching {
		// Nothing precedes the start: caught up already.
		f.watching, f.flagAt, f.done = false, 0, f.untilCaughtUp
		for _, resp := range f.responses() {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		if f.done {
			return nil
		}
	}
	if f.watching {
		// Watermarks too: the one at or above the tail says the read has
		// everything before it.
		if len(opt.Filter.Kinds) == 0 {
			opt.Filter.Kinds = []message.Kind{message.KindData}
		}
		opt.Filter.Kinds = append(opt.Filter.Kinds, message.KindTimeTick)
	}
	tr := s.traffic.of(r.GetChannel())
	rd := tr.addReader()
	defer tr.removeReader(rd)
	for term := a.Term; ; {
		scanErr, err := s.feed(ctx, w, opt, f, stream, rd)
		if err != nil || f.done || ctx.Err() != nil {
			return err
		}
		next, nextTerm, err := s.nextWAL(ctx, r.GetChannel(), term, scanErr)
		if err != nil {
			return err
		}
		if f.pos != "" {
			// After the last message delivered: its checkpoint names its
			// place in the chain (or the backend), which the next WAL
			// reads across a seal.
			cp, err := next.ParseCheckpoint(f.pos)
			if err != nil {
				return s.appendError(r.GetChannel(), err)
			}
			opt.DeliverPolicy = cursor.After(cp)
		}
		s.n.log.Debug("read goes on at a newer term", "channel", r.GetChannel(), "term", term, "next", nextTerm, "after", f.pos)
		w, term = next, nextTerm
	}
}

// feed sends what a scanner of w reads with opt, through f, until the read
// is done (f.done), ctx ends, or the scanner ends: then it returns the
// scanner's error (nil when it ended without one). err is a failure that
// ends the read: a stream that broke, a truncated start.
func (s *service) feed(ctx context.Context, w adaptor.WAL, opt adaptor.ReadOption, f *readFeed,
	stream *connect.ServerStream[streamwalv1.ReadResponse], rd *reader) (scanErr, err error) {
	channel := w.Channel().Name
	// A batch scanner: the messages come in slices, a response takes up to
	// batch of them, from one slice or several.
	sc, err := w.ReadBatches(ctx, opt)
	if err != nil {
		if errors.Is(err, walimpls.ErrPositionGone) {
			return nil, connect.NewError(connect.CodeOutOfRange, err)
		}
		if errors.IsAny(err, walimpls.ErrClosed, walimpls.ErrFenced) {
			return err, nil // closed as the read switched to it: the next one
		}
		return nil, s.appendError(channel, err)
	}
	defer func() { _ = sc.Close() }()
	ended := false
	for {
		select {
		case msgs, ok := <-sc.Batches():
			ended = !ok
			f.push(msgs)
		case <-ctx.Done():
			return nil, nil
		}
		// Take what else is ready, up to a batch.
		for more := true; more && !ended && len(f.out) < f.batch; {
			select {
			case msgs, ok := <-sc.Batches():
				ended = !ok
				f.push(msgs)
			default:
				more = false
			}
		}
		for _, resp := range f.responses() {
			if err := stream.Send(resp); err != nil {
				return nil, err
			}
			if ms := resp.GetMessages(); len(ms) > 0 {
				rd.tt.Store(max(rd.tt.Load(), ms[len(ms)-1].GetTimetick()))
			}
		}
		if f.done {
			return nil, nil
		}
		if ended {
			err := sc.Error()
			if errors.Is(err, walimpls.ErrPositionGone) {
				return nil, connect.NewError(connect.CodeOutOfRange, err)
			}
			return err, nil
		}
	}
}

// nextWAL is the WAL a read goes on with once its scanner of channel's
// WAL at term ended with scanErr: the channel's WAL at a newer term on
// this node, waited for while its open is in flight (owned). Otherwise the
// read ends with the error that says why: the channel is not owned here
// (FailedPrecondition with WrongNode naming the owner this node knows),
// the node is shutting down or the new term's open failed (Unavailable),
// no newer term came (Unavailable with WrongNode), or the scanner failed
// on its own (its error, mapped).
func (s *service) nextWAL(ctx context.Context, channel string, term int64, scanErr error) (adaptor.WAL, int64, error) {
	if scanErr != nil && !errors.IsAny(scanErr, walimpls.ErrClosed, walimpls.ErrFenced) {
		return nil, 0, s.appendError(channel, scanErr)
	}
	w, a, err := s.owned(ctx, channel, 0)
	if err != nil {
		return nil, 0, err
	}
	if a.Term <= term {
		cause := scanErr
		if cause == nil {
			cause = errors.Newf("the read of channel %q at term %d ended", channel, term)
		}
		snap, _ := s.n.view.Snapshot()
		return nil, 0, s.wrongNode(snap, channel, connect.CodeUnavailable,
			errors.Wrapf(cause, "no newer term of channel %q on node %s to go on with", channel, s.n.cfg.ID))
	}
	return w, a.Term, nil
}

// readFeed turns what a scanner delivers into a read's responses: pure
// logic, no I/O. It gives each message its position, holds the last
// `last` messages back until the tail (a watermark at or above it), marks
// the response that completes the messages before the tail, and ends
// there for until_caught_up.
type readFeed struct {
	batch, last   int
	untilCaughtUp bool
	// watching: the tail is not reached yet (until_caught_up or last).
	watching bool
	tail     cursor.Checkpoint
	// pos is the position of the next message: the checkpoint of the one
	// before it, or the read's start.
	pos  string
	ring []*streamwalv1.Delivered // the last `last` messages, while watching
	out  []*streamwalv1.Delivered // to send
	// flagAt is how many messages of out precede the caught_up flag; -1
	// when there is none to send.
	flagAt int
	// done: caught up with until_caught_up; the read ends once out is sent.
	done bool
}

func (f *readFeed) push(msgs []message.Immutable) {
	for _, m := range msgs {
		if m.Kind() == message.KindTimeTick {
			if f.watching && adaptor.CaughtUp(m, f.tail) {
				f.watching = false
				f.out = append(f.out, f.ring...)
				f.ring = nil
				f.flagAt = len(f.out)
				f.done = f.untilCaughtUp
			}
			continue
		}
		if f.done {
			return
		}
		d := delivered(m)
		d.Position = f.pos
		if d.GetCheckpoint() != "" {
			f.pos = d.GetCheckpoint()
		}
		if f.watching && f.last > 0 {
			if len(f.ring) == f.last {
				f.ring = f.ring[1:]
			}
			f.ring = append(f.ring, d)
			continue
		}
		f.out = append(f.out, d)
	}
}

// responses takes out in responses of up to batch messages, the caught_up
// flag on the one that ends where it belongs.
func (f *readFeed) responses() []*streamwalv1.ReadResponse {
	var resps []*streamwalv1.ReadResponse
	for len(f.out) > 0 || f.flagAt == 0 {
		n := min(len(f.out), f.batch)
		if f.flagAt >= 0 {
			n = min(n, f.flagAt)
		}
		resp := &streamwalv1.ReadResponse{Messages: f.out[:n:n]}
		f.out = f.out[n:]
		if f.flagAt >= 0 {
			if f.flagAt -= n; f.flagAt == 0 {
				resp.CaughtUp, f.flagAt = true, -1
			}
		}
		resps = append(resps, resp)
	}
	return resps
}

// readOption maps a read request to the adaptor's options, and says the
// position of the first message it delivers when a checkpoint names it
// ("" otherwise).
func readOption(w adaptor.WAL, r *streamwalv1.ReadRequest) (adaptor.ReadOption, string, error) {
	opt := adaptor.ReadOption{Name: "api", Filter: adaptor.Filter{VChannels: r.GetVchannels()}}
	if r.GetTermBegins() {
		opt.Filter.Kinds = []message.Kind{message.KindData, message.KindTermBegin}
	}
	start := ""
	switch st := r.GetStart().(type) {
	case nil, *streamwalv1.ReadRequest_All:
		opt.DeliverPolicy = cursor.All()
	case *streamwalv1.ReadRequest_Latest:
		opt.DeliverPolicy = cursor.Latest()
	case *streamwalv1.ReadRequest_FromTimetick:
		opt.DeliverPolicy = cursor.FromTimeTick(st.FromTimetick)
	case *streamwalv1.ReadRequest_AfterCheckpoint:
		cp, err := w.ParseCheckpoint(st.AfterCheckpoint)
		if err != nil {
			return opt, "", err
		}
		opt.DeliverPolicy, start = cursor.After(cp), cp.Marshal()
	case *streamwalv1.ReadRequest_StartFrom:
		id, err := w.ParseID(st.StartFrom)
		if err != nil {
			return opt, "", err
		}
		opt.DeliverPolicy = cursor.StartFrom(id)
	case *streamwalv1.ReadRequest_StartAfter:
		id, err := w.ParseID(st.StartAfter)
		if err != nil {
			return opt, "", err
		}
		opt.DeliverPolicy = cursor.StartAfter(id)
	}
	return opt, start, nil
}

// delivered maps a delivered message to the API.
func delivered(m message.Immutable) *streamwalv1.Delivered {
	tt, _ := m.TimeTick()
	term, _ := m.Term()
	d := &streamwalv1.Delivered{Id: m.ID().Marshal(), Timetick: tt, Term: term, Payload: m.Payload(),
		Properties: m.Properties().User(), Vchannel: m.VChannel(), Key: m.IdempotencyKey(), Kind: kindName(m.Kind())}
	if cp, err := cursor.CheckpointOf(m); err == nil {
		d.Checkpoint = cp.Marshal()
	}
	return d
}

func kindName(k message.Kind) string {
	if k == message.KindTermBegin {
		return "term-begin"
	}
	return "data"
}
