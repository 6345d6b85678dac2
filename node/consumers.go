package node

// Consumers' checkpoints and the release of the log: the Commit and
// Checkpoints RPCs, the source the retainer (package retention) reads the
// owned channels from, and what the reports say of retention.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/streamwal/streamwal/adaptor"
	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/walmanager"
)

// Reasons of a CommitRefused detail.
const (
	refusedBackwards = "backwards"
	refusedTruncated = "truncated"
	refusedBeyond    = "beyond"
	refusedStaleTerm = "stale_term"
	refusedInvalid   = "invalid"
)

// tails caches, per channel, the last tail the node took of it: a commit
// at or before it is within the log without writing a watermark.
type tails struct {
	mu sync.Mutex
	at map[string]termTail
}

type termTail struct {
	term int64
	cp   cursor.Checkpoint
}

func (t *tails) covers(channel string, term int64, cp cursor.Checkpoint) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tt, ok := t.at[channel]
	return ok && tt.term == term && within(cp, tt.cp)
}

func (t *tails) note(channel string, term int64, cp cursor.Checkpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.at[channel]; !ok || cur.term < term || (cur.term == term && cur.cp.Before(cp)) {
		t.at[channel] = termTail{term: term, cp: cp}
	}
}

// within reports whether cp names what the log holds at tail: its
// timetick is at or below the tail's. (Its position is not compared: a
// tail's position is the watermark before the tail's own, and a message
// the writer released before that watermark carries a later one. A
// checkpoint forged with a position past the log's end only makes its
// truncation fail until the log reaches it; the others' checkpoints hold
// the log wherever they are.)
func within(cp, tail cursor.Checkpoint) bool { return cp.TimeTick <= tail.TimeTick }

// commitRefused is a Commit's refusal with its CommitRefused detail.
func commitRefused(code connect.Code, reason string, err error, stored *streamwalv1.ConsumerCheckpoint, floor string) *connect.Error {
	e := connect.NewError(code, err)
	if d, derr := connect.NewErrorDetail(&streamwalv1.CommitRefused{Reason: reason, Stored: stored, TruncatedTo: floor}); derr == nil {
		e.AddDetail(d)
	}
	return e
}

func (s *service) Commit(ctx context.Context, req *connect.Request[streamwalv1.CommitRequest]) (res *connect.Response[streamwalv1.CommitResponse], err error) {
	defer func() { s.count("Commit", err) }()
	n := s.n
	if n.consumers == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.Newf("node %s keeps no consumer checkpoints (node.Config.Consumers)", n.cfg.ID))
	}
	r := req.Msg
	sc := consumers.Scope{Consumer: r.GetConsumer(), VChannel: r.GetVchannel()}
	if err := sc.Validate(); err != nil {
		return nil, commitRefused(connect.CodeInvalidArgument, refusedInvalid, err, nil, "")
	}
	w, a, err := s.owned(ctx, r.GetChannel(), r.GetTerm())
	if err != nil {
		return nil, err
	}
	cp, err := w.ParseCheckpoint(r.GetCheckpoint())
	if err == nil && cp.IsZero() {
		err = errors.New("an empty checkpoint")
	}
	if err != nil {
		return nil, commitRefused(connect.CodeInvalidArgument, refusedInvalid, errors.Wrap(err, "checkpoint"), nil, "")
	}
	if !s.tails.covers(r.GetChannel(), a.Term, cp) {
		tail, err := w.Tail(ctx)
		if err != nil {
			return nil, s.appendError(r.GetChannel(), err)
		}
		s.tails.note(r.GetChannel(), a.Term, tail)
		if !within(cp, tail) {
			return nil, commitRefused(connect.CodeInvalidArgument, refusedBeyond,
				errors.Newf("checkpoint %s of channel %q lies beyond its log, which ends at %s", r.GetCheckpoint(), r.GetChannel(), tail.Marshal()), nil, "")
		}
	}
	stored, err := n.consumers.Commit(ctx, r.GetChannel(), sc, cp, a.Term, w.ParseCheckpoint)
	if err != nil {
		return nil, s.commitError(r.GetChannel(), err)
	}
	if n.retainer != nil {
		n.retainer.Notify(r.GetChannel())
	}
	return connect.NewResponse(&streamwalv1.CommitResponse{Committed: consumerOf(stored, nil)}), nil
}

// commitError maps a failed commit to the API.
func (s *service) commitError(channel string, err error) *connect.Error {
	var refused *consumers.RefusedError
	if errors.As(err, &refused) {
		var stored *streamwalv1.ConsumerCheckpoint
		if refused.Stored.Revision != 0 {
			stored = consumerOf(refused.Stored, nil)
		}
		reason := refusedBackwards
		switch {
		case errors.Is(err, consumers.ErrTruncated):
			reason = refusedTruncated
		case errors.Is(err, consumers.ErrStaleTerm):
			reason = refusedStaleTerm
			snap, _ := s.n.view.Snapshot()
			e := s.wrongNode(snap, channel, connect.CodeFailedPrecondition, err)
			if d, derr := connect.NewErrorDetail(&streamwalv1.CommitRefused{Reason: reason, Stored: stored, TruncatedTo: refused.Floor.Checkpoint}); derr == nil {
				e.AddDetail(d)
			}
			return e
		}
		return commitRefused(connect.CodeFailedPrecondition, reason, err, stored, refused.Floor.Checkpoint)
	}
	switch {
	case errors.Is(err, consumers.ErrInvalid):
		return commitRefused(connect.CodeInvalidArgument, refusedInvalid, err, nil, "")
	case errors.IsAny(err, meta.ErrUnavailable, meta.ErrConflict, meta.ErrClosed, context.DeadlineExceeded):
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

func (s *service) Checkpoints(ctx context.Context, req *connect.Request[streamwalv1.CheckpointsRequest]) (res *connect.Response[streamwalv1.CheckpointsResponse], err error) {
	defer func() { s.count("Checkpoints", err) }()
	n := s.n
	if n.consumers == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.Newf("node %s keeps no consumer checkpoints (node.Config.Consumers)", n.cfg.ID))
	}
	channel := req.Msg.GetChannel()
	if _, _, err := s.owned(ctx, channel, 0); err != nil {
		return nil, err
	}
	read, err := n.consumers.Load(ctx, channel)
	if err != nil {
		return nil, s.commitError(channel, err)
	}
	out := &streamwalv1.CheckpointsResponse{}
	var st *retention.Stats
	if n.retainer != nil {
		if got, ok := n.retainer.Stats(channel); ok {
			st = &got
			out.Retention = retentionOf(got)
		}
	}
	for _, c := range read.Consumers {
		out.Consumers = append(out.Consumers, consumerOf(c, st))
	}
	return connect.NewResponse(out), nil
}

// consumerOf maps a stored checkpoint to the API; st, when known, says
// whether it holds the log back.
func consumerOf(c consumers.Checkpoint, st *retention.Stats) *streamwalv1.ConsumerCheckpoint {
	out := &streamwalv1.ConsumerCheckpoint{Consumer: c.Consumer, Vchannel: c.VChannel, Checkpoint: c.Checkpoint,
		Timetick: c.TimeTick, Resume: c.ResumeAt(), Term: c.Term}
	if !c.At.IsZero() {
		out.CommittedAt = timestamppb.New(c.At)
	}
	if st != nil {
		for _, h := range st.Holding {
			if h == c.Scope {
				out.Holding = true
			}
		}
	}
	return out
}

// retentionReport is a channel's retention on /admin/channels.
type retentionReport struct {
	Bytes       int64           `json:"bytes"`
	Messages    int64           `json:"messages"`
	OldestID    string          `json:"oldest_id,omitempty"`
	OldestTime  *time.Time      `json:"oldest_time,omitempty"`
	OldestAgeMS *int64          `json:"oldest_age_ms,omitempty"`
	HeldBy      string          `json:"held_by"`
	TruncatedTo string          `json:"truncated_to,omitempty"`
	Segments    []segmentReport `json:"segments,omitempty"`
	Dropped     *droppedReport  `json:"dropped,omitempty"`
	Policy      *policyReport   `json:"policy,omitempty"`
	MeasuredAt  time.Time       `json:"measured_at"`
	LastError   string          `json:"last_error,omitempty"`
}

type segmentReport struct {
	Index          uint64 `json:"index"`
	Backend        string `json:"backend,omitempty"`
	BackendChannel string `json:"backend_channel,omitempty"`
	Sealed         bool   `json:"sealed,omitempty"`
	Bytes          int64  `json:"bytes"`
	Messages       int64  `json:"messages"`
}

// policyReport is the retention policy in force.
type policyReport struct {
	MaxAge   string `json:"max_age,omitempty"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
}

type droppedReport struct {
	Messages int64 `json:"messages"`
	Bytes    int64 `json:"bytes"`
}

// retentionReportOf is the report of st at now.
func retentionReportOf(st retention.Stats, now time.Time) *retentionReport {
	r := &retentionReport{Bytes: st.Bytes, Messages: st.Messages, HeldBy: st.HeldBy, TruncatedTo: st.Floor, MeasuredAt: st.MeasuredAt}
	if !st.Oldest.IsZero() {
		r.OldestID = st.Oldest.Marshal()
		t := st.OldestTime
		age := max(now.Sub(t).Milliseconds(), 0)
		r.OldestTime, r.OldestAgeMS = &t, &age
	}
	for _, s := range st.Segments {
		r.Segments = append(r.Segments, segmentReport{Index: s.Index, Backend: s.Backend, BackendChannel: s.BackendChannel,
			Sealed: s.Sealed, Bytes: s.Bytes, Messages: s.Messages})
	}
	if st.Dropped != [2]int64{} {
		r.Dropped = &droppedReport{Messages: st.Dropped[0], Bytes: st.Dropped[1]}
	}
	if p := st.Policy; !p.IsZero() {
		r.Policy = &policyReport{MaxBytes: p.MaxBytes}
		if p.MaxAge > 0 {
			r.Policy.MaxAge = p.MaxAge.String()
		}
	}
	if st.Err != nil {
		r.LastError = st.Err.Error()
	}
	return r
}

// retentionOf maps stats to the API.
func retentionOf(st retention.Stats) *streamwalv1.Retention {
	out := &streamwalv1.Retention{Bytes: uint64(max(st.Bytes, 0)), Messages: uint64(max(st.Messages, 0)), HeldBy: st.HeldBy,
		TruncatedTo: st.Floor, DroppedMessages: uint64(max(st.Dropped[0], 0)), DroppedBytes: uint64(max(st.Dropped[1], 0)),
		MaxAgeMs: st.Policy.MaxAge.Milliseconds(), MaxBytes: st.Policy.MaxBytes}
	if !st.Oldest.IsZero() {
		out.OldestId, out.OldestTime = st.Oldest.Marshal(), timestamppb.New(st.OldestTime)
	}
	if !st.MeasuredAt.IsZero() {
		out.MeasuredAt = timestamppb.New(st.MeasuredAt)
	}
	for _, s := range st.Segments {
		out.Segments = append(out.Segments, &streamwalv1.SegmentRetention{Index: s.Index, Backend: s.Backend, BackendChannel: s.BackendChannel,
			Sealed: s.Sealed, Bytes: uint64(max(s.Bytes, 0)), Messages: uint64(max(s.Messages, 0))})
	}
	return out
}

// retentionSource is the retainer's view of the node: the channels it owns
// at their assigned terms, and what it appended.
type retentionSource struct{ s *service }

func (rs retentionSource) Channels() []string {
	n := rs.s.n
	snap, _ := n.view.Snapshot()
	var out []string
	for ch, a := range snap.Assignments {
		if a.Value.Node == n.cfg.ID {
			out = append(out, ch)
		}
	}
	return out
}

func (rs retentionSource) WAL(channel string) (adaptor.WAL, bool) {
	n := rs.s.n
	snap, _ := n.view.Snapshot()
	a, ok := snap.Assignments[channel]
	if !ok || a.Value.Node != n.cfg.ID || !n.accepting.Load() {
		return nil, false
	}
	w, err := n.mgr.GetAvailableWAL(walmanager.Channel{Name: channel, Term: a.Value.Term})
	if err != nil {
		return nil, false
	}
	return w, true
}

func (rs retentionSource) Appended(channel string, since uint64) bool {
	t, ok := rs.s.traffic.snapshot(channel)
	if !ok {
		return false // no append through this node since it began to record
	}
	return t.waiting > 0 || t.lastTT > since
}

// validateRetention checks a retention configuration for Config.Validate.
func validateRetention(c retention.Config) error {
	if err := c.Validate(); err != nil {
		return errors.WithStack(fmt.Errorf("retention: %w: %w", err, ErrInvalidConfig))
	}
	return nil
}
