package client

// commit.go: consumers' checkpoints. A consumer commits how far it has
// durably processed a channel (or one vchannel of it) through the
// channel's owner, which stores it and releases the log before the
// slowest consumer's checkpoint; a consumer that restarts asks where it
// resumes (Checkpoint) and reads on from there (Read's After).

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
)

// Errors of Commit and Checkpoint, checked with errors.Is. A
// *CommitRefusedError matches ErrRefused and, by its reason,
// ErrCheckpointBackwards or ErrCheckpointTruncated.
var (
	// ErrCheckpointBackwards is a commit before the consumer's stored
	// checkpoint: another instance of the consumer committed further (or
	// this one replays after a restart it did not read its checkpoint
	// for). A consumer that gets it is stale: it should stop, or read its
	// Checkpoint again and resume there.
	ErrCheckpointBackwards = errors.New("client: checkpoint moves backwards")
	// ErrCheckpointTruncated is a commit before where the channel's log is
	// truncated: what it names is gone. Resume from
	// CommitRefusedError.ResumeAt.
	ErrCheckpointTruncated = errors.New("client: checkpoint before the truncated log")
	// ErrNoCheckpoint is a consumer that has no committed checkpoint on
	// the channel (Checkpoint): it starts from the first message kept.
	ErrNoCheckpoint = errors.New("client: no committed checkpoint")
)

// Reasons of a CommitRefusedError (the owner's CommitRefused.reason).
const (
	// RefusedBackwards: before the consumer's stored checkpoint.
	RefusedBackwards = "backwards"
	// RefusedTruncated: before where the log is truncated.
	RefusedTruncated = "truncated"
	// RefusedBeyond: after what the log holds (not a checkpoint the
	// channel delivered).
	RefusedBeyond = "beyond"
	// RefusedInvalid: a consumer or vchannel name that is not one, or a
	// checkpoint that does not decode.
	RefusedInvalid = "invalid"
	// refusedStaleTerm: the node's term is older than the stored
	// checkpoint's: a newer owner exists, and the client retries there.
	refusedStaleTerm = "stale_term"
)

// CommitOptions tune one Commit.
type CommitOptions struct {
	// VChannel is the vchannel the consumer processes; "" for the whole
	// channel. A consumer of one vchannel never holds the log back while
	// its vchannel has no message after its checkpoint.
	VChannel string
}

// Committed is a consumer's checkpoint as the channel's owner stored it.
type Committed struct {
	Consumer string
	// VChannel is "" for a consumer of the whole channel.
	VChannel string
	// Checkpoint is the checkpoint the consumer committed last (a
	// Delivered's Checkpoint), TimeTick its timetick.
	Checkpoint string
	TimeTick   uint64
	// Resume is where the consumer resumes (Read's After): Checkpoint, or
	// a later point the owner moved a vchannel consumer to when it
	// truncated the log past its checkpoint with no message of its
	// vchannel in between.
	Resume string
	// Term is the term of the owner that stored it, At when.
	Term int64
	At   time.Time
	// Holding is true when this consumer holds the log back: the owner
	// truncates at its checkpoint (Checkpoints only).
	Holding bool
}

// CommitRefusedError is a commit the channel's owner refused for good;
// nothing was stored. It matches ErrRefused, and ErrCheckpointBackwards
// or ErrCheckpointTruncated by its Reason; it unwraps to the node's
// answer.
type CommitRefusedError struct {
	Channel  string
	Consumer string
	VChannel string
	// Checkpoint is the checkpoint the commit carried.
	Checkpoint string
	// Reason is why: RefusedBackwards, RefusedTruncated, RefusedBeyond,
	// RefusedInvalid, or a reason this client does not know.
	Reason string
	// Stored is the consumer's checkpoint as stored (backwards,
	// truncated), nil when it has none.
	Stored *Committed
	// TruncatedTo is where the log is truncated (truncated).
	TruncatedTo string
	err         error
}

func (e *CommitRefusedError) Error() string {
	scope := "consumer " + e.Consumer
	if e.VChannel != "" {
		scope += " of vchannel " + e.VChannel
	}
	return fmt.Sprintf("client: commit of %s on %q refused (%s): %v", scope, e.Channel, e.Reason, e.err)
}

// Is matches ErrRefused, and the sentinel of the reason.
func (e *CommitRefusedError) Is(target error) bool {
	switch target {
	case ErrRefused:
		return true
	case ErrCheckpointBackwards:
		return e.Reason == RefusedBackwards
	case ErrCheckpointTruncated:
		return e.Reason == RefusedTruncated
	}
	return false
}

// Unwrap returns the node's answer (a *connect.Error).
func (e *CommitRefusedError) Unwrap() error { return e.err }

// ResumeAt is where a consumer whose commit was refused resumes reading
// (Read's After): its stored resume point, or "" (the first message kept)
// when it has none.
func (e *CommitRefusedError) ResumeAt() string {
	if e.Stored != nil {
		return e.Stored.Resume
	}
	return ""
}

// Commit stores checkpoint (a Delivered's Checkpoint the consumer has
// durably processed) as where the named consumer of channel resumes, and
// returns what is stored. It is sent to the channel's owner and retried,
// within ctx, while the owner moves or does not answer. Committing the
// stored checkpoint again succeeds and changes nothing, so a Commit after
// one whose outcome is unknown (ctx ended) can send the same checkpoint
// again. A refusal is a *CommitRefusedError (ErrCheckpointBackwards,
// ErrCheckpointTruncated, or ErrRefused for a checkpoint beyond the log
// or a bad name); no permission, or a node that keeps no checkpoints, is
// ErrRefused too.
//
// Several consumers of one channel each commit under their own name; the
// owner keeps the log from the earliest of their checkpoints on.
func (c *Client) Commit(ctx context.Context, channel, consumer, checkpoint string, opts CommitOptions) (Committed, error) {
	req := &streamwalv1.CommitRequest{Channel: channel, Consumer: consumer, Vchannel: opts.VChannel, Checkpoint: checkpoint}
	var out Committed
	what := fmt.Sprintf("commit of consumer %s on %q", consumer, channel)
	err := c.unary(ctx, channel, what, func(ctx context.Context, cl streamwalv1connect.WALServiceClient) error {
		resp, err := cl.Commit(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		out = committedOf(resp.Msg.GetCommitted())
		return nil
	}, func(err error) error {
		r, _ := detail[*streamwalv1.CommitRefused](err)
		switch {
		case r == nil:
			return refusal(what, err)
		case r.GetReason() == refusedStaleTerm:
			return nil // a newer owner: find it
		}
		e := &CommitRefusedError{Channel: channel, Consumer: consumer, VChannel: opts.VChannel, Checkpoint: checkpoint,
			Reason: r.GetReason(), TruncatedTo: r.GetTruncatedTo(), err: err}
		if r.GetStored() != nil {
			s := committedOf(r.GetStored())
			e.Stored = &s
		}
		return e
	})
	return out, err
}

// ChannelCheckpoints is what Checkpoints returns.
type ChannelCheckpoints struct {
	// Consumers are the channel's consumers, by vchannel then name (the
	// whole channel's first).
	Consumers []Committed
	// Retention is what the log retains, as its owner last measured it;
	// nil before its first measure at its term.
	Retention *Retention
}

// Retention is what a channel's log retains and why, as its owner measured
// it (see the README's "Releasing the log").
type Retention struct {
	// Bytes (payload and properties) and data messages retained.
	Bytes, Messages uint64
	// OldestID is the oldest retained data message, OldestTime when it was
	// appended; "" and zero when the log retains none.
	OldestID   string
	OldestTime time.Time
	// HeldBy says who holds the log back: "consumer <name>", "consumer
	// <name> of vchannel <v>", "vchannel <v> (no consumer)", "no
	// consumer", "retention", or "" when nothing does.
	HeldBy string
	// TruncatedTo is where the log is truncated; "" before the first
	// truncation.
	TruncatedTo string
	// Segments are the kept segments of the channel's chain, oldest first.
	Segments []SegmentRetention
	// DroppedMessages and DroppedBytes are what the retention policy
	// dropped that no consumer had committed past, since the owner holds
	// the channel.
	DroppedMessages, DroppedBytes uint64
	// MaxAge and MaxBytes are the policy in force (0: no cap).
	MaxAge   time.Duration
	MaxBytes int64
	// MeasuredAt is when the owner measured it.
	MeasuredAt time.Time
}

// SegmentRetention is one kept segment's share of a Retention.
type SegmentRetention struct {
	Index uint64
	// Backend is the backend entry that holds it, BackendChannel its
	// channel there.
	Backend, BackendChannel string
	// Sealed segments are read-only; the last one is written.
	Sealed          bool
	Bytes, Messages uint64
}

// RetentionOf converts the API's Retention (a ChannelStatus's, from the
// nodes' Status); nil for nil.
func RetentionOf(r *streamwalv1.Retention) *Retention {
	if r == nil {
		return nil
	}
	out := &Retention{Bytes: r.GetBytes(), Messages: r.GetMessages(), OldestID: r.GetOldestId(), HeldBy: r.GetHeldBy(),
		TruncatedTo: r.GetTruncatedTo(), DroppedMessages: r.GetDroppedMessages(), DroppedBytes: r.GetDroppedBytes(),
		MaxAge: time.Duration(r.GetMaxAgeMs()) * time.Millisecond, MaxBytes: r.GetMaxBytes()}
	if r.GetOldestTime() != nil {
		out.OldestTime = r.GetOldestTime().AsTime()
	}
	if r.GetMeasuredAt() != nil {
		out.MeasuredAt = r.GetMeasuredAt().AsTime()
	}
	for _, s := range r.GetSegments() {
		out.Segments = append(out.Segments, SegmentRetention{Index: s.GetIndex(), Backend: s.GetBackend(), BackendChannel: s.GetBackendChannel(),
			Sealed: s.GetSealed(), Bytes: s.GetBytes(), Messages: s.GetMessages()})
	}
	return out
}

// Checkpoints returns channel's consumers with their committed checkpoints
// and what its log retains, from its owner (retried like Commit).
func (c *Client) Checkpoints(ctx context.Context, channel string) (ChannelCheckpoints, error) {
	var out ChannelCheckpoints
	err := c.unary(ctx, channel, fmt.Sprintf("checkpoints of %q", channel), func(ctx context.Context, cl streamwalv1connect.WALServiceClient) error {
		resp, err := cl.Checkpoints(ctx, connect.NewRequest(&streamwalv1.CheckpointsRequest{Channel: channel}))
		if err != nil {
			return err
		}
		out = ChannelCheckpoints{Retention: RetentionOf(resp.Msg.GetRetention())}
		for _, cp := range resp.Msg.GetConsumers() {
			out.Consumers = append(out.Consumers, committedOf(cp))
		}
		return nil
	}, func(err error) error { return refusal(fmt.Sprintf("checkpoints of %q", channel), err) })
	return out, err
}

// Checkpoint returns where the named consumer of channel (of vchannel, ""
// for the whole channel) resumes: give it to Read as ReadOptions.After. A
// consumer without a committed checkpoint is ErrNoCheckpoint: it starts
// from the first message kept (After "").
func (c *Client) Checkpoint(ctx context.Context, channel, consumer, vchannel string) (string, error) {
	cps, err := c.Checkpoints(ctx, channel)
	if err != nil {
		return "", err
	}
	for _, cp := range cps.Consumers {
		if cp.Consumer == consumer && cp.VChannel == vchannel {
			return cp.Resume, nil
		}
	}
	scope := "consumer " + consumer
	if vchannel != "" {
		scope += " of vchannel " + vchannel
	}
	return "", fmt.Errorf("client: %s on %q: %w", scope, channel, ErrNoCheckpoint)
}

// unary sends call to channel's owner until it succeeds, final says its
// error is final (returning the error to return), ctx ends, or the client
// closes. Every other error is retried: at the owner a WrongNode detail
// names (when it knows a newer term than the attempt's), else at the
// assignment's owner after a backoff that ends early when the channel's
// assignment changes; an attempt whose node the cluster moved the channel
// away from is abandoned and retried at once (moves.go). what names the
// request in errors.
func (c *Client) unary(ctx context.Context, channel, what string, call func(context.Context, streamwalv1connect.WALServiceClient) error, final func(error) error) error {
	var hint *streamwalv1.WrongNode
	for attempt := 0; ; attempt++ {
		tg, err := c.owner(ctx, channel, hint, attempt)
		if err != nil {
			return fmt.Errorf("client: %s: %w", what, err)
		}
		cl, err := c.conn(tg.addr)
		if err != nil {
			return fmt.Errorf("client: %s: %w", what, err)
		}
		actx, watched := c.moves.watch(ctx, channel, tg)
		err = call(actx, cl)
		moved := watched()
		if err == nil {
			return nil
		}
		hint = nil
		if moved && ctx.Err() == nil {
			c.log.Debug("attempt abandoned: the channel moved", "request", what, "node", tg.node, "term", tg.term)
			continue
		}
		if terr := c.tlsRefusal(ctx, tg.addr, err); terr != nil {
			return fmt.Errorf("client: %s at %s: %w: %w", what, tg.addr, ErrRefused, terr)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: %s: %w (last attempt: %w)", what, ctx.Err(), err)
		}
		if ferr := final(err); ferr != nil {
			return ferr
		}
		if wn, _ := detail[*streamwalv1.WrongNode](err); wn != nil && wn.GetOwnerAddr() != "" && wn.GetOwnerAddr() != tg.addr && wn.GetTerm() > tg.term {
			hint = wn // try where the node says the owner is
		}
		c.log.Debug("attempt failed", "request", what, "node", tg.node, "code", connect.CodeOf(err), "error", err)
	}
}

// refusal returns err as ErrRefused when its code says retrying cannot
// change it (bad input, no credentials or permission, a node that does not
// serve the request), nil otherwise.
func refusal(what string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange, connect.CodeUnauthenticated, connect.CodePermissionDenied,
		connect.CodeUnimplemented:
		return fmt.Errorf("client: %s: %w: %w", what, ErrRefused, err)
	}
	return nil
}

// committedOf maps the API's ConsumerCheckpoint.
func committedOf(cp *streamwalv1.ConsumerCheckpoint) Committed {
	out := Committed{Consumer: cp.GetConsumer(), VChannel: cp.GetVchannel(), Checkpoint: cp.GetCheckpoint(), TimeTick: cp.GetTimetick(),
		Resume: cp.GetResume(), Term: cp.GetTerm(), Holding: cp.GetHolding()}
	if out.Resume == "" {
		out.Resume = out.Checkpoint
	}
	if cp.GetCommittedAt() != nil {
		out.At = cp.GetCommittedAt().AsTime()
	}
	return out
}
