package main

// checkpoints.go: walctl commit and walctl checkpoints — consumers'
// checkpoints, and what each channel's log retains because of them — and
// the retention that channels -v and explain show.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/walimpls"
)

var commitCommand = &command{name: "commit", args: "<channel> <consumer> <checkpoint>", minArgs: 3, maxArgs: 3, flags: []string{"vchannel"},
	summary: "commit a consumer's checkpoint through the channel's owner",
	detail: `The checkpoint is a message's checkpoint as a reader receives it
(walctl tail -json prints it as "checkpoint"; tail's POSITION of the next
message is the same): the consumer has durably processed everything up to
that message. The channel's owner stores it with its term, and truncates
the log at the slowest consumer's checkpoint soon after. Each consumer
name keeps its own checkpoint; -vchannel names a consumer of one vchannel.
Prints what is stored. Refused, exit 1 with the reason: an unknown
channel; "backwards" (before the consumer's stored checkpoint: a stale
consumer); "truncated" (before where the log is truncated); "beyond"
(after what the log holds); "invalid" (a checkpoint or name that is none).
Committing the stored checkpoint again changes nothing.`,
	run: func(ctx context.Context, c *ctl, args []string) error {
		return c.commit(ctx, args[0], args[1], args[2])
	}}

var checkpointsCommand = &command{name: "checkpoints", args: "<channel>", minArgs: 1, maxArgs: 1, flags: []string{"drop", "vchannel"},
	summary: "a channel's consumers with their checkpoints, and what its log retains (-drop: remove a consumer)",
	detail: `Lists each consumer of the channel: its vchannel ("-" for the whole
channel), the checkpoint it committed and how long ago, where it resumes
(walctl tail <channel> -from <resume> prints what it has not processed),
the term of the owner that stored it, and whether it holds the log back.
Then what the log retains, as its owner measured it: bytes and messages,
the oldest message and its age, who holds the log back, where it is
truncated, its segments, and what the retention policy dropped. All from
the owner (its Checkpoints); when the owner does not answer, the
checkpoints as the cluster's meta store holds them, without retention.

-drop <consumer> removes a consumer that is gone, so that it no longer
holds the log back (the owner's next retention round truncates without
it); -vchannel names its consumer of one vchannel. It writes the meta
store in etcd directly (etcd role streamwal-admin). An unknown consumer is
refused, exit 1.`,
	check: func(o options, _ []string) string {
		if o.vchannel != "" && o.drop == "" {
			return "-vchannel goes with -drop <consumer>"
		}
		return ""
	},
	run: func(ctx context.Context, c *ctl, args []string) error {
		if c.opts.drop != "" {
			return c.dropConsumer(ctx, args[0], consumers.Scope{Consumer: c.opts.drop, VChannel: c.opts.vchannel})
		}
		return c.checkpoints(ctx, args[0])
	}}

// checkpointStore returns the consumers' checkpoints in the cluster's meta
// store (made on first use).
func (c *ctl) checkpointStore() (*consumers.Store, error) {
	if c.consumerStore == nil {
		kv, err := etcdstore.New(c.cli, etcdstore.Options{Prefix: metaPrefix(c.layout.Root)})
		if err != nil {
			return nil, errors.Wrap(err, "the cluster's meta store")
		}
		c.closers = append(c.closers, func() { _ = kv.Close() })
		if c.consumerStore, err = consumers.NewStore(kv, consumers.Options{}); err != nil {
			return nil, err
		}
	}
	return c.consumerStore, nil
}

// consumerView is one consumer's checkpoint as walctl shows it.
type consumerView struct {
	Consumer    string    `json:"consumer"`
	VChannel    string    `json:"vchannel,omitempty"`
	Checkpoint  string    `json:"checkpoint"`
	TimeTick    uint64    `json:"timetick"`
	Resume      string    `json:"resume"`
	Term        int64     `json:"term"`
	CommittedAt time.Time `json:"committed_at"`
	// Holding: it holds the log back; nil when unknown (read from the
	// meta store, not from the owner).
	Holding *bool `json:"holding,omitempty"`
}

func consumerViewOf(cp client.Committed) consumerView {
	holding := cp.Holding
	return consumerView{Consumer: cp.Consumer, VChannel: cp.VChannel, Checkpoint: cp.Checkpoint, TimeTick: cp.TimeTick,
		Resume: cp.Resume, Term: cp.Term, CommittedAt: cp.At, Holding: &holding}
}

func consumerViewOfStored(cp consumers.Checkpoint) consumerView {
	return consumerView{Consumer: cp.Consumer, VChannel: cp.VChannel, Checkpoint: cp.Checkpoint, TimeTick: cp.TimeTick,
		Resume: cp.ResumeAt(), Term: cp.Term, CommittedAt: cp.At}
}

// scope names the consumer as the owner does ("consumer x of vchannel v").
func (v consumerView) scope() string {
	return consumers.Scope{Consumer: v.Consumer, VChannel: v.VChannel}.String()
}

// retentionView is what a channel's log retains, as walctl shows it.
type retentionView struct {
	Bytes       uint64        `json:"bytes"`
	Messages    uint64        `json:"messages"`
	OldestID    string        `json:"oldest_id,omitempty"`
	OldestTime  *time.Time    `json:"oldest_time,omitempty"`
	HeldBy      string        `json:"held_by"`
	TruncatedTo string        `json:"truncated_to,omitempty"`
	Segments    []segmentView `json:"segments,omitempty"`
	Dropped     *droppedView  `json:"dropped,omitempty"`
	MaxAgeMS    int64         `json:"max_age_ms,omitempty"`
	MaxBytes    int64         `json:"max_bytes,omitempty"`
	MeasuredAt  time.Time     `json:"measured_at"`
}

// droppedView is what the retention policy dropped.
type droppedView struct {
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

type segmentView struct {
	Index    uint64 `json:"index"`
	Backend  string `json:"backend"` // entry/channel
	Sealed   bool   `json:"sealed,omitempty"`
	Bytes    uint64 `json:"bytes"`
	Messages uint64 `json:"messages"`
}

// retentionViewOf is r as walctl shows it; nil for nil.
func retentionViewOf(r *client.Retention) *retentionView {
	if r == nil {
		return nil
	}
	v := &retentionView{Bytes: r.Bytes, Messages: r.Messages, OldestID: r.OldestID, HeldBy: r.HeldBy, TruncatedTo: r.TruncatedTo,
		MaxAgeMS: r.MaxAge.Milliseconds(), MaxBytes: r.MaxBytes, MeasuredAt: r.MeasuredAt}
	if !r.OldestTime.IsZero() {
		t := r.OldestTime
		v.OldestTime = &t
	}
	for _, s := range r.Segments {
		v.Segments = append(v.Segments, segmentView{Index: s.Index, Backend: s.Backend + "/" + s.BackendChannel, Sealed: s.Sealed,
			Bytes: s.Bytes, Messages: s.Messages})
	}
	if r.DroppedMessages != 0 || r.DroppedBytes != 0 {
		v.Dropped = &droppedView{Messages: r.DroppedMessages, Bytes: r.DroppedBytes}
	}
	return v
}

// summary is the retention in one line: "1.2 MiB in 340 messages, oldest
// s0/3 (5m ago), held by consumer indexer".
func (r *retentionView) summary() string {
	s := fmt.Sprintf("%s in %d message(s)", byteSize(r.Bytes), r.Messages)
	if r.OldestID != "" && r.OldestTime != nil {
		s += fmt.Sprintf(", oldest %s (%s ago)", r.OldestID, ago(*r.OldestTime))
	}
	return s + ", " + r.heldBy()
}

func (r *retentionView) heldBy() string {
	if r.HeldBy == "" {
		return "held by nothing (truncated up to its tail)"
	}
	return "held by " + r.HeldBy
}

// segments says what each kept segment retains.
func (r *retentionView) segments() string {
	var parts []string
	for _, s := range r.Segments {
		state := "written"
		if s.Sealed {
			state = "sealed"
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s): %s in %d message(s)", s.Index, s.Backend, state, byteSize(s.Bytes), s.Messages))
	}
	return strings.Join(parts, "; ")
}

// dropped says what the retention policy dropped, and the policy; "" when
// there is no policy and nothing was dropped.
func (r *retentionView) dropped() string {
	var policy []string
	if r.MaxAgeMS > 0 {
		policy = append(policy, "max age "+(time.Duration(r.MaxAgeMS)*time.Millisecond).String())
	}
	if r.MaxBytes > 0 {
		policy = append(policy, "max bytes "+byteSize(uint64(r.MaxBytes)))
	}
	if len(policy) == 0 && r.Dropped == nil {
		return ""
	}
	s := "nothing"
	if r.Dropped != nil {
		s = fmt.Sprintf("%d message(s), %s", r.Dropped.Messages, byteSize(r.Dropped.Bytes))
	}
	if len(policy) == 0 {
		return s + " (no policy now)"
	}
	return s + " (policy: " + strings.Join(policy, ", ") + ")"
}

// checkpointsView is what checkpoints shows of a channel.
type checkpointsView struct {
	Channel string `json:"channel"`
	// Source is "owner" (its Checkpoints) or "store" (the meta store, read
	// directly: the owner did not answer).
	Source    string         `json:"source"`
	Owner     string         `json:"owner,omitempty"`
	Consumers []consumerView `json:"consumers"`
	Retention *retentionView `json:"retention,omitempty"`
	// TruncatedTo is the floor in the meta store (source "store").
	TruncatedTo string `json:"truncated_to,omitempty"`
	// OwnerError is why the owner did not answer (source "store").
	OwnerError string `json:"owner_error,omitempty"`
}

// loadCheckpoints asks channel's live owner in s for its checkpoints
// (within statusTimeout), or reads them from the meta store when it does
// not answer, or when askOwner is false.
func (c *ctl) loadCheckpoints(ctx context.Context, s cluster.Snapshot, channel string, askOwner bool) (checkpointsView, error) {
	v := checkpointsView{Channel: channel, Consumers: []consumerView{}}
	var ownerErr error
	if a, _, ok := s.Owner(channel); ok && !askOwner {
		v.Owner = a.Node
	} else if ok {
		v.Owner = a.Node
		cps, err := c.ownerCheckpoints(ctx, channel)
		if err == nil {
			v.Source, v.Retention = "owner", retentionViewOf(cps.Retention)
			for _, cp := range cps.Consumers {
				v.Consumers = append(v.Consumers, consumerViewOf(cp))
			}
			return v, nil
		}
		ownerErr = err
	} else if av, ok := s.Assignments[channel]; ok {
		v.Owner = av.Value.Node
		ownerErr = errors.Newf("%s is not live: its lease is gone", av.Value.Node)
	}
	store, err := c.checkpointStore()
	if err != nil {
		return v, err
	}
	stored, err := store.Load(ctx, channel)
	if err != nil {
		if ownerErr != nil {
			return v, errors.Wrapf(err, "the owner did not answer (%v), nor did the meta store", ownerErr)
		}
		return v, err
	}
	v.Source, v.TruncatedTo = "store", stored.Floor.Checkpoint
	if ownerErr != nil {
		v.OwnerError = ownerErr.Error()
	}
	for _, cp := range stored.Consumers {
		v.Consumers = append(v.Consumers, consumerViewOfStored(cp))
	}
	return v, nil
}

// ownerCheckpoints asks channel's owner for its checkpoints through the
// client, within statusTimeout.
func (c *ctl) ownerCheckpoints(ctx context.Context, channel string) (client.ChannelCheckpoints, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	cl, err := client.New(ctx, c.clientConfig())
	if err != nil {
		return client.ChannelCheckpoints{}, err
	}
	defer cl.Close()
	return cl.Checkpoints(ctx, channel)
}

// checkpoints runs "walctl checkpoints <channel>".
func (c *ctl) checkpoints(ctx context.Context, channel string) error {
	if err := walimpls.ValidateChannelName(channel); err != nil {
		return err
	}
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	v, err := c.loadCheckpoints(ctx, s, channel, true)
	if err != nil {
		return err
	}
	if _, assigned := s.Assignments[channel]; !assigned && len(v.Consumers) == 0 && v.TruncatedTo == "" {
		return errUnknownChannel(channel)
	}
	if v.OwnerError != "" {
		fmt.Fprintf(c.errOut, "walctl: the owner did not answer (%s): the checkpoints as the meta store holds them, without retention\n", v.OwnerError)
	}
	if c.json {
		return json.NewEncoder(c.out).Encode(v)
	}
	if len(v.Consumers) == 0 {
		fmt.Fprintln(c.out, "no consumer has committed on "+channel)
	} else {
		w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "CONSUMER\tVCHANNEL\tCHECKPOINT\tCOMMITTED\tRESUME\tTERM\tHOLDING")
		for _, cp := range v.Consumers {
			holding := "?"
			if cp.Holding != nil {
				holding = map[bool]string{true: "yes", false: "-"}[*cp.Holding]
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\t%s\t%d\t%s\n", cp.Consumer, orDash(cp.VChannel), cp.Checkpoint, ago(cp.CommittedAt), cp.Resume, cp.Term, holding)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	switch {
	case v.Retention != nil:
		r := v.Retention
		fmt.Fprintf(c.out, "retention: %s", r.summary())
		if r.TruncatedTo != "" {
			fmt.Fprintf(c.out, ", truncated to %s", r.TruncatedTo)
		}
		fmt.Fprintf(c.out, "; measured %s ago by %s\n", ago(r.MeasuredAt), v.Owner)
		if len(r.Segments) > 0 {
			fmt.Fprintf(c.out, "segments:  %s\n", r.segments())
		}
		if d := r.dropped(); d != "" {
			fmt.Fprintf(c.out, "dropped:   %s\n", d)
		}
	case v.Source == "owner":
		fmt.Fprintf(c.out, "retention: unknown: %s has not measured the log yet at this term\n", v.Owner)
	default:
		t := "never truncated"
		if v.TruncatedTo != "" {
			t = "truncated to " + v.TruncatedTo
		}
		why := "the owner did not answer"
		if v.Owner == "" {
			why = "the channel has no owner"
		}
		fmt.Fprintf(c.out, "retention: unknown (%s); %s\n", why, t)
	}
	return nil
}

// dropConsumer runs "walctl checkpoints <channel> -drop <consumer>".
func (c *ctl) dropConsumer(ctx context.Context, channel string, sc consumers.Scope) error {
	store, err := c.checkpointStore()
	if err != nil {
		return err
	}
	if err := store.Drop(ctx, channel, sc); err != nil {
		if errors.Is(err, consumers.ErrNotFound) {
			return errors.Newf("channel %q has no %s (walctl checkpoints %s lists its consumers)", channel, sc, channel)
		}
		return err
	}
	if c.json {
		return json.NewEncoder(c.out).Encode(map[string]any{"channel": channel, "consumer": sc.Consumer, "vchannel": sc.VChannel, "dropped": true})
	}
	_, err = fmt.Fprintf(c.out, "dropped %s of %s: it no longer holds the log back (the owner's next retention round truncates without it)\n", sc, channel)
	return err
}

// commit runs "walctl commit <channel> <consumer> <checkpoint>".
func (c *ctl) commit(ctx context.Context, channel, consumer, checkpoint string) error {
	s, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	if err := checkServable(s, channel); err != nil {
		return err
	}
	cl, err := client.New(ctx, c.clientConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	got, err := cl.Commit(ctx, channel, consumer, checkpoint, client.CommitOptions{VChannel: c.opts.vchannel})
	var refused *client.CommitRefusedError
	if errors.As(err, &refused) {
		return commitRefusal(refused)
	}
	if err != nil {
		return err
	}
	v := consumerViewOf(got)
	v.Holding = nil // a commit does not say
	if c.json {
		return json.NewEncoder(c.out).Encode(struct {
			Channel string `json:"channel"`
			consumerView
		}{channel, v})
	}
	_, err = fmt.Fprintf(c.out, "%s of %s: committed %s (term %d, at %s); resumes after %s\n",
		v.scope(), channel, v.Checkpoint, v.Term, v.CommittedAt.Format(time.RFC3339), v.Resume)
	return err
}

// commitRefusal says why a commit was refused, and what is stored.
func commitRefusal(r *client.CommitRefusedError) error {
	sc := consumers.Scope{Consumer: r.Consumer, VChannel: r.VChannel}
	stored := ""
	if r.Stored != nil {
		stored = fmt.Sprintf("; stored: %s (term %d, committed %s ago)", r.Stored.Checkpoint, r.Stored.Term, ago(r.Stored.At))
	}
	var why string
	switch r.Reason {
	case client.RefusedBackwards:
		why = fmt.Sprintf("%s is before the stored checkpoint of %s: a stale consumer", r.Checkpoint, sc)
	case client.RefusedTruncated:
		from := "the first message kept"
		if at := r.ResumeAt(); at != "" {
			from = "after " + at
		}
		why = fmt.Sprintf("%s is before where the log is truncated (%s): what it names is gone; the consumer resumes from %s", r.Checkpoint, r.TruncatedTo, from)
	case client.RefusedBeyond:
		why = fmt.Sprintf("%s lies beyond the channel's log: not a checkpoint it delivered", r.Checkpoint)
	default:
		why = r.Unwrap().Error()
		var ce *connect.Error
		if errors.As(r, &ce) {
			why = ce.Message() // the node's own words, without the code
		}
	}
	return errors.Newf("commit refused (%s): %s%s", r.Reason, why, stored)
}

// byteSize is n bytes in a short human form: 512 B, 1.5 KiB, 3.2 MiB.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ago is how long ago t was, rounded for a person.
func ago(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < 0:
		d = 0
	case d >= time.Minute:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// slowestFirst orders consumers by their checkpoints' timeticks, the
// slowest first.
func slowestFirst(cs []consumerView) []consumerView {
	out := slices.Clone(cs)
	slices.SortStableFunc(out, func(a, b consumerView) int { return cmp.Compare(a.TimeTick, b.TimeTick) })
	return out
}

// retentionOfStatus is a channel's retention in its owner's Status; nil
// when unknown.
func retentionOfStatus(cs *streamwalv1.ChannelStatus) *retentionView {
	if cs == nil {
		return nil
	}
	return retentionViewOf(client.RetentionOf(cs.GetRetention()))
}

// retentionColumns are channels -v's RETAINED, OLDEST and HELD BY cells
// of r (tab-separated; "-" when unknown).
func retentionColumns(r *retentionView) string {
	if r == nil {
		return "-\t-\t-"
	}
	oldest := "-"
	if r.OldestTime != nil {
		oldest = ago(*r.OldestTime)
	}
	return fmt.Sprintf("%s, %d msg\t%s\t%s", byteSize(r.Bytes), r.Messages, oldest, orDash(r.HeldBy))
}

// explainRetention fills x's retention line and consumers (explain).
func (c *ctl) explainRetention(ctx context.Context, s cluster.Snapshot, x *explanation) {
	// An owner that does not serve the channel yet would keep explain
	// waiting: the checkpoints as stored then.
	if v, err := c.loadCheckpoints(ctx, s, x.Channel, x.NodeState == "available"); err != nil {
		fmt.Fprintf(c.errOut, "walctl: the consumers of %s could not be read: %v\n", x.Channel, err)
	} else {
		x.Consumers, x.consumersRead = slowestFirst(v.Consumers), true
		if x.Retention == nil {
			x.Retention = v.Retention
		}
	}
	switch r := x.Retention; {
	case r != nil:
		x.Retained = r.summary()
		if r.TruncatedTo != "" {
			x.Retained += ", truncated to " + r.TruncatedTo
		}
	case x.NodeState == "":
		x.Retained = "unknown: the owner did not say"
	default:
		x.Retained = fmt.Sprintf("unknown: %s has not measured the log at term %d (its first retention round reads all of it; a node without consumer checkpoints never does)", x.Owner, x.Term)
	}
}

// printRetention prints explain's lines on retention: what the log
// retains (per segment when several), the consumers (the slowest first),
// what the policy dropped.
func printRetention(line func(k, format string, args ...any), x explanation) {
	line("retained:", "%s", x.Retained)
	if r := x.Retention; r != nil && len(r.Segments) > 1 {
		for i, seg := range strings.Split(r.segments(), "; ") {
			line(map[bool]string{true: "segments:", false: ""}[i == 0], "%s", seg)
		}
	}
	if x.consumersRead {
		if len(x.Consumers) == 0 {
			line("consumers:", "none has committed")
		}
		for i, cp := range x.Consumers {
			held := ""
			if cp.Holding != nil && *cp.Holding {
				held = ", holding the log"
			}
			line(map[bool]string{true: "consumers:", false: ""}[i == 0], "%s at %s, committed %s ago (term %d)%s", strings.TrimPrefix(cp.scope(), "consumer "),
				cp.Checkpoint, ago(cp.CommittedAt), cp.Term, held)
		}
	}
	if r := x.Retention; r != nil {
		if d := r.dropped(); d != "" {
			line("dropped:", "%s", d)
		}
	}
}
