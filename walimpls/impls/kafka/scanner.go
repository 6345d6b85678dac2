package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/scanout"
)

// Read implements walimpls.WALImpl. The scanner consumes partition 0
// directly (no group, no committed offsets) with read_committed isolation,
// one franz-go client per scanner, fetching at most the read-ahead bytes at
// a time.
func (w *wal) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	return w.read(ctx, opt, false)
}

// ReadBatches implements walimpls.BatchReader: a slice per fetch.
func (w *wal) ReadBatches(ctx context.Context, opt walimpls.ReadOption) (walimpls.BatchScanner, error) {
	return w.read(ctx, opt, true)
}

func (w *wal) read(ctx context.Context, opt walimpls.ReadOption, batches bool) (*scanner, error) {
	if w.isClosed() {
		return nil, w.closedErr()
	}
	if w.deleted.Load() {
		return nil, w.goneErr("read")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opt.ReadAheadBytes < 0 {
		return nil, errors.Newf("kafka: read channel %q: negative read-ahead %d", w.ch.Name, opt.ReadAheadBytes)
	}
	readAhead := opt.ReadAheadBytes
	if readAhead == 0 {
		readAhead = w.o.cfg.ReadAheadBytes
	}
	p := opt.DeliverPolicy
	tailN, tail := p.Tail()
	if tail && tailN < 1 {
		return nil, errors.Wrapf(walimpls.ErrInvalidPosition, "kafka: read channel %q from %s: n must be at least 1", w.ch.Name, p)
	}
	// The scanner's own client lists the offsets too: everything a scanner
	// does goes over connections it owns and closes.
	cl, err := w.newConsumer(readAhead)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	start, end, err := listBounds(ctx, adm, w.topic, logPartition, true)
	if err != nil {
		cl.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errors.Wrapf(err, "kafka: read channel %q", w.ch.Name)
	}
	s := &scanner{Run: lifecycle.NewRun(), w: w, name: opt.Name, cl: cl, adm: adm, out: scanout.New(batches, 0)}
	switch id, inclusive, ok := p.StartID(); {
	case p.IsAll():
		s.next, s.all = start, true
	case p.IsLatest():
		s.next = end
	case tail:
		if s.next, err = w.tailStart(ctx, s, tailN, start, end); err != nil {
			cl.Close()
			return nil, err
		}
	case ok:
		seq, err := message.SeqOf(Name, id)
		if err != nil {
			cl.Close()
			return nil, errors.WithStack(fmt.Errorf("kafka: read channel %q from %s: %w: %w", w.ch.Name, id, err, walimpls.ErrInvalidPosition))
		}
		if !inclusive {
			seq++
		}
		if seq < start {
			cl.Close()
			return nil, errors.Wrapf(walimpls.ErrPositionGone, "kafka: read channel %q from offset %d: the log starts at %d", w.ch.Name, seq, start)
		}
		s.next = seq
	default:
		cl.Close()
		return nil, errors.Wrapf(walimpls.ErrInvalidPosition, "kafka: read channel %q: deliver policy %s", w.ch.Name, p)
	}
	if !w.scanners.Add(s) {
		cl.Close()
		if w.deleted.Load() {
			return nil, w.goneErr("read")
		}
		return nil, w.closedErr()
	}
	go s.run()
	return s, nil
}

// scanner delivers one channel's messages. Its goroutine (run) owns next,
// delivered and the consuming client.
type scanner struct {
	*lifecycle.Run
	w    *wal
	name string
	cl   *kgo.Client
	adm  *kadm.Client
	out  *scanout.Out

	// owned by run
	next      int64
	all       bool // cursor.All: nothing delivered yet may follow the log start
	delivered bool
	offsets   []int64 // of the fetch being delivered
}

// Chan implements walimpls.Scanner (Read).
func (s *scanner) Chan() <-chan message.Immutable { return s.out.Chan() }

// Batches implements walimpls.BatchScanner (ReadBatches).
func (s *scanner) Batches() <-chan []message.Immutable { return s.out.Batches() }

// errReposition asks run for a new consumer at next.
var errReposition = errors.New("reposition")

func (s *scanner) run() {
	var err error
	defer func() {
		s.w.closeClient(s.cl)
		s.w.scanners.Remove(s)
		s.out.Close()
		if err != nil && !s.Stopped() {
			s.w.log.Debug("scanner ended", "scanner", s.name, "err", err)
		}
		s.End(err)
	}()
	for {
		err = s.consume()
		if !errors.Is(err, errReposition) {
			return
		}
	}
}

// consume reads from next until the scanner stops (nil), fails, or must be
// repositioned (errReposition).
func (s *scanner) consume() error {
	parts := map[string]map[int32]kgo.Offset{s.w.topic: {logPartition: kgo.NoResetOffset().At(s.next)}}
	s.cl.AddConsumePartitions(parts)
	defer s.cl.RemoveConsumePartitions(map[string][]int32{s.w.topic: {logPartition}})
	cl := s.cl
	for {
		fs := cl.PollFetches(s.Context())
		if s.Stopped() || fs.IsClientClosed() {
			return nil
		}
		for _, fe := range fs.Errors() {
			switch {
			case isOutOfRange(fe.Err):
				return s.outOfRange()
			case errors.IsAny(fe.Err, context.Canceled, context.DeadlineExceeded):
				return nil
			case isPermanentFetchErr(fe.Err):
				return errors.Wrapf(fe.Err, "kafka: scanner %q of channel %q", s.name, s.w.ch.Name)
			case isUnknownTopic(fe.Err) && s.topicGone():
				// Deleted by another node (this opener's Delete stops
				// its scanners itself).
				return s.w.goneErr(fmt.Sprintf("scanner %q", s.name))
			default:
				s.w.log.Debug("fetch error", "scanner", s.name, "err", fe.Err)
			}
		}
		msgs, offsets := s.out.Slice(fs.NumRecords()), s.offsets[:0]
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < s.next || r.Partition != logPartition {
				return
			}
			props := make(map[string]string, len(r.Headers))
			for _, h := range r.Headers {
				props[h.Key] = string(h.Value)
			}
			msgs = append(msgs, message.NewImmutable(message.Restore(r.Value, props), message.NewSeqID(Name, r.Offset)))
			offsets = append(offsets, r.Offset)
		})
		s.offsets = offsets
		n := s.out.Deliver(s.Stopping(), msgs)
		if n > 0 {
			s.next = offsets[n-1] + 1
			s.delivered = true
		}
		if n < len(msgs) {
			return nil // stopping
		}
	}
}

// topicGone asks the cluster, over the scanner's client, whether the
// channel's topic is gone or was created again since the WAL opened.
func (s *scanner) topicGone() bool {
	gone, err := topicGone(s.Context(), s.cl, s.w.topic, s.w.topicID)
	return err == nil && gone
}

// outOfRange decides what an OFFSET_OUT_OF_RANGE means: next was truncated
// (ErrPositionGone, or the new log start for a cursor.All scanner that has
// delivered nothing yet), or next is beyond the end (wait for it).
func (s *scanner) outOfRange() error {
	pace := backoff.Config{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond, NoJitter: true}
	for attempt := 0; ; attempt++ {
		start, end, err := listBounds(s.Context(), s.adm, s.w.topic, logPartition, false)
		switch {
		case s.Stopped():
			return nil
		case err != nil:
		case s.next < start && s.all && !s.delivered:
			s.next = start
			return errReposition
		case s.next < start:
			return errors.Wrapf(walimpls.ErrPositionGone, "kafka: scanner %q of channel %q at offset %d: the log now starts at %d",
				s.name, s.w.ch.Name, s.next, start)
		case s.next <= end:
			return errReposition
		}
		if pace.Wait(s.Context(), attempt) != nil { // stopping
			return nil
		}
	}
}

// newConsumer returns a client for a scanner: read_committed, never
// resetting an offset by itself, fetching at most readAhead bytes at once.
func (w *wal) newConsumer(readAhead int) (*kgo.Client, error) {
	cfg := &w.o.cfg
	// One fetch of at most the read-ahead is buffered at a time (a broker
	// returns at least one batch even when it is larger than the fetch
	// size).
	ra := int32(min(readAhead, 1<<30))
	opts := append(w.o.baseOpts(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(ra),
		kgo.FetchMaxPartitionBytes(ra),
		kgo.MaxConcurrentFetches(1),
		kgo.FetchMaxWait(time.Second),
	)
	opts = append(opts, cfg.ClientOptions...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("kafka: client: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	return cl, nil
}

// isPermanentFetchErr reports fetch errors that retrying cannot fix.
func isPermanentFetchErr(err error) bool {
	return errors.IsAny(err, kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.SaslAuthenticationFailed, kerr.UnsupportedVersion)
}
