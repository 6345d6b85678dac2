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
