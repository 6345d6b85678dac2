package node

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"google.golang.org/protobuf/proto"

	"github.com/streamwal/streamwal/adaptor"
	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

// service implements the WALService API on a node.
type service struct {
	n       *Node
	traffic *traffic
	tails   tails // the last tail taken of each channel (consumers.go)
}

// owned returns the WAL of a channel this node owns, or the API error that
// says why not (every such error is a refusal: nothing was stored). A
// channel this node is opening at its assigned term is waited for, once,
// within ctx.
func (s *service) owned(ctx context.Context, channel string, term int64) (adaptor.WAL, cluster.Assignment, error) {
	n := s.n
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return nil, cluster.Assignment{}, notStored(connect.NewError(connect.CodeInvalidArgument, err))
	}
	for waited := false; ; waited = true {
		if !n.accepting.Load() {
			return nil, cluster.Assignment{}, notStored(connect.NewError(connect.CodeUnavailable, errors.Newf("node %s is shutting down", n.cfg.ID)))
		}
		snap, _ := n.view.Snapshot()
		a, ok := snap.Assignments[channel]
		if !ok || a.Value.Node != n.cfg.ID {
			return nil, a.Value, notStored(s.wrongNode(snap, channel, connect.CodeFailedPrecondition,
				errors.Newf("node %s does not own channel %q", n.cfg.ID, channel)))
		}
		if term != 0 && term != a.Value.Term {
			return nil, a.Value, notStored(s.wrongNode(snap, channel, connect.CodeFailedPrecondition,
				errors.Newf("channel %q is at term %d here, not %d", channel, a.Value.Term, term)))
		}
		w, err := n.mgr.GetAvailableWAL(walmanager.Channel{Name: channel, Term: a.Value.Term})
		switch {
		case err == nil:
			return w, a.Value, nil
		case errors.Is(err, walimpls.ErrFenced):
			return nil, a.Value, notStored(s.wrongNode(snap, channel, connect.CodeAborted, err))
		}
		// The channel is being opened here at its term (a move's first
		// appends arrive while the new owner opens): wait for the open
		// once rather than refuse, and look again.
		if ended := n.openEnded(channel, a.Value.Term); ended != nil && !waited {
			if n.waitingForOpen != nil {
				n.waitingForOpen(channel)
			}
			select {
			case <-ended:
				continue
			case <-ctx.Done():
			case <-n.ctx.Done():
			}
		}
		return nil, a.Value, notStored(connect.NewError(connect.CodeUnavailable, errors.Wrapf(err, "channel %q at term %d", channel, a.Value.Term)))
	}
}

// wrongNode is an error with a WrongNode detail naming the owner this node
// knows.
func (s *service) wrongNode(snap cluster.Snapshot, channel string, code connect.Code, cause error) *connect.Error {
	e := connect.NewError(code, cause)
	d := &streamwalv1.WrongNode{Channel: channel}
	if a, node, ok := snap.Owner(channel); ok {
		d.Owner, d.OwnerAddr, d.Term = a.Node, node.Addr, a.Term
	} else if a, ok := snap.Assignments[channel]; ok {
		d.Owner, d.Term = a.Value.Node, a.Value.Term
	}
	if detail, err := connect.NewErrorDetail(d); err == nil {
		e.AddDetail(detail)
	}
	return e
}

// notStored marks an API error as a refusal that stored nothing.
func notStored(e *connect.Error) *connect.Error { return withOutcome(e, true) }

func withOutcome(e *connect.Error, notStored bool) *connect.Error {
	if detail, err := connect.NewErrorDetail(&streamwalv1.Outcome{NotStored: notStored}); err == nil {
		e.AddDetail(detail)
	}
	return e
}

// appendError maps an append's failure to the API: its code, and whether it
// stored nothing.
func (s *service) appendError(channel string, err error) *connect.Error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, walimpls.ErrFenced):
		snap, _ := s.n.view.Snapshot()
		return withOutcome(s.wrongNode(snap, channel, connect.CodeAborted, err), walimpls.NotStored(err))
	case errors.Is(err, walimpls.ErrTooLarge):
		code = connect.CodeResourceExhausted
	case errors.IsAny(err, message.ErrReservedProperty, walimpls.ErrInvalidPosition, cursor.ErrCorruptCheckpoint, message.ErrCorruptID):
		code = connect.CodeInvalidArgument
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.IsAny(err, walimpls.ErrClosed, walmanager.ErrChannelNotAvailable, walmanager.ErrManagerClosed) || walimpls.IsRetryable(err):
		code = connect.CodeUnavailable
	}
	return withOutcome(connect.NewError(code, err), walimpls.NotStored(err))
}

// toMessage builds the message of an append, refusing reserved keys.
func toMessage(m *streamwalv1.Message, key string) (message.Message, error) {
	if m == nil {
		m = &streamwalv1.Message{}
	}
	msg, err := message.New(m.GetPayload(), m.GetProperties())
	if err != nil {
		return message.Message{}, err
	}
	if vc := m.GetVchannel(); vc != "" {
		if err := walimpls.ValidateChannelName(vc); err != nil {
			return message.Message{}, errors.Wrapf(err, "vchannel")
		}
		msg = msg.WithVChannel(vc)
	}
	if key != "" {
		msg = msg.WithIdempotencyKey(key)
	}
	return msg, nil
}

func (s *service) count(method string, err error) {
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	s.n.metrics.requests.WithLabelValues(method, code).Inc()
}

func (s *service) Append(ctx context.Context, req *connect.Request[streamwalv1.AppendRequest]) (res *connect.Response[streamwalv1.AppendResponse], err error) {
	defer func() { s.count("Append", err) }()
	s.n.appends.Add(1)
	defer s.n.appends.Done()
	r := req.Msg
	w, a, err := s.owned(ctx, r.GetChannel(), r.GetTerm())
	if err != nil {
		return nil, err
	}
	tr := s.traffic.of(r.GetChannel())
	tr.begin(a.Term, time.Now())
	defer func() {
		if res != nil {
			tr.end(a.Term, time.Now(), res.Msg.GetId(), res.Msg.GetTimetick(), true, nil)
		} else {
			tr.end(a.Term, time.Now(), "", 0, false, fault(err, ctx.Err()))
		}
	}()
	msg, err := toMessage(r.GetMessage(), r.GetKey())
	if err != nil {
		return nil, notStored(connect.NewError(connect.CodeInvalidArgument, err))
	}
	if r.GetRetry() && r.GetKey() == "" {
		return nil, notStored(connect.NewError(connect.CodeInvalidArgument, errors.New("a retry needs its idempotency key")))
	}
	var keys *keys
	if key := r.GetKey(); key != "" {
		keys = s.n.keysOf(r.GetChannel())
		known, err := keys.acquire(ctx, key)
		if err != nil {
			return nil, notStored(connect.NewError(connect.CodeCanceled, err))
		}
		if known != nil {
			s.n.metrics.dedup.WithLabelValues("memory").Inc()
			return connect.NewResponse(duplicate(known)), nil
		}
		var stored *streamwalv1.AppendResponse
		defer func() { keys.end(key, stored) }()
		if r.GetRetry() {
			found, err := s.resolve(ctx, w, a, key, r.GetResolveFrom())
			if err != nil {
				return nil, err
			}
			if found != nil {
				s.n.metrics.dedup.WithLabelValues("log").Inc()
				stored = found
				return connect.NewResponse(duplicate(found)), nil
			}
			s.n.metrics.dedup.WithLabelValues("stored").Inc()
		}
		out, err := w.Append(ctx, msg)
		if err != nil {
			return nil, s.appendError(r.GetChannel(), err)
		}
		stored = appendResponse(out, a.Term)
		return connect.NewResponse(stored), nil
	}
	out, err := w.Append(ctx, msg)
	if err != nil {
		return nil, s.appendError(r.GetChannel(), err)
	}
	return connect.NewResponse(appendResponse(out, a.Term)), nil
}

// duplicate is a stored answer given again to a retry.
func duplicate(r *streamwalv1.AppendResponse) *streamwalv1.AppendResponse {
	dup := proto.Clone(r).(*streamwalv1.AppendResponse)
	dup.Duplicate = true
	return dup
}

func appendResponse(r adaptor.AppendResult, term int64) *streamwalv1.AppendResponse {
	return &streamwalv1.AppendResponse{Id: r.ID.Marshal(), Timetick: r.TimeTick, Term: term,
		ResolveFrom: cursor.Checkpoint{Position: r.ID, TimeTick: r.TimeTick}.Marshal()}
}

// resolve looks for a copy of key stored since from, by this owner or a
// previous one: it writes a watermark (Tail) and reads with term-begins
// and watermarks until one at or above it, so every message acknowledged
// before the retry arrived has been seen. A copy a reader would not deliver
// (of a term fenced before it was stored) is never seen: nil.
func (s *service) resolve(ctx context.Context, w adaptor.WAL, a cluster.Assignment, key, from string) (*streamwalv1.AppendResponse, error) {
	start := cursor.All()
	if from != "" {
		cp, err := w.ParseCheckpoint(from)
		if err != nil {
			return nil, notStored(connect.NewError(connect.CodeInvalidArgument, errors.Wrap(err, "resolve_from")))
		}
		start = cursor.After(cp)
	}
	tail, err := w.Tail(ctx)
	if err != nil {
		return nil, s.appendError(a.Channel, err)
	}
	sc, err := w.Read(ctx, adaptor.ReadOption{Name: "resolve", DeliverPolicy: start,
		Filter: adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTimeTick}}})
	if err != nil {
		if errors.Is(err, walimpls.ErrPositionGone) {
			// The earlier copy's place was pruned: it was delivered to every
			// checkpointed consumer; answer as stored is impossible, so
			// refuse rather than store it twice.
			return nil, withOutcome(connect.NewError(connect.CodeFailedPrecondition,
				errors.Wrap(err, "resolve: the retried append's place was truncated")), false)
		}
		return nil, s.appendError(a.Channel, err)
	}
	defer func() { _ = sc.Close() }()
	for {
		select {
		case m, ok := <-sc.Chan():
			if !ok {
				return nil, s.appendError(a.Channel, scannerEnded("resolve", sc))
			}
			if adaptor.CaughtUp(m, tail) {
				return nil, nil
			}
			if m.Kind() == message.KindData && m.IdempotencyKey() == key {
				tt, _ := m.TimeTick()
				term, _ := m.Term()
				return &streamwalv1.AppendResponse{Id: m.ID().Marshal(), Timetick: tt, Term: term,
					ResolveFrom: cursor.Checkpoint{Position: m.ID(), TimeTick: tt}.Marshal()}, nil
			}
		case <-ctx.Done():
			return nil, withOutcome(connect.NewError(connect.CodeDeadlineExceeded, errors.Wrap(ctx.Err(), "resolve")), true)
		}
	}
}

func (s *service) AppendBatch(ctx context.Context, req *connect.Request[streamwalv1.AppendBatchRequest]) (res *connect.Response[streamwalv1.AppendBatchResponse], err error) {
	defer func() { s.count("AppendBatch", err) }()
	s.n.appends.Add(1)
	defer s.n.appends.Done()
	r := req.Msg
	w, a, err := s.owned(ctx, r.GetChannel(), r.GetTerm())
	if err != nil {
		return nil, err
	}
	tr := s.traffic.of(r.GetChannel())
	tr.begin(a.Term, time.Now())
	defer func() {
		if res != nil && len(res.Msg.GetResults()) > 0 {
			last := res.Msg.GetResults()[len(res.Msg.GetResults())-1]
			tr.end(a.Term, time.Now(), last.GetId(), last.GetTimetick(), true, nil)
		} else {
			tr.end(a.Term, time.Now(), "", 0, false, fault(err, ctx.Err()))
		}
	}()
	msgs := make([]message.Message, len(r.GetMessages()))
	for i, m := range r.GetMessages() {
		if msgs[i], err = toMessage(m, ""); err != nil {
			return nil, notStored(connect.NewError(connect.CodeInvalidArgument, errors.Wrapf(err, "message %d", i)))
		}
	}
	out, err := w.AppendBatch(ctx, msgs)
	resp := &streamwalv1.AppendBatchResponse{}
	for _, o := range out {
		resp.Results = append(resp.Results, appendResponse(o, a.Term))
	}
	if err != nil {
		e := s.appendError(r.GetChannel(), err)
		if detail, derr := connect.NewErrorDetail(resp); derr == nil && len(resp.Results) > 0 {
			e.AddDetail(detail) // the stored prefix
		}
		return nil, e
	}
	return connect.NewResponse(resp), nil
}

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

func (s *service) Status(ctx context.Context, _ *connect.Request[streamwalv1.StatusRequest]) (*connect.Response[streamwalv1.StatusResponse], error) {
	n := s.n
	resp := &streamwalv1.StatusResponse{Node: n.cfg.ID, Addr: n.addr, Backend: n.cfg.Backend}
	for _, r := range s.reports(time.Now()) {
		resp.Channels = append(resp.Channels, statusOf(r))
	}
	s.count("Status", nil)
	return connect.NewResponse(resp), nil
}

// scannerEnded is the error of a scanner sc that ended before what step
// was looking for: the scanner's own error kept as the cause, so that
// appendError maps it (a closed WAL, a truncated position).
func scannerEnded(step string, sc walimpls.Scanner) error {
	<-sc.Done() // Error is valid once Done is closed
	if err := sc.Error(); err != nil {
		return errors.Wrapf(err, "%s: scanner ended", step)
	}
	return errors.Newf("%s: scanner ended", step)
}
