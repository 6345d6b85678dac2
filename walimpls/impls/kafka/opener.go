package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walimpls"
)

// Name is the backend's name in configuration and in its message IDs.
const Name = "kafka"

// NewBuilder returns the Kafka backend's walimpls.Builder. Its BuildParams
// Config decodes into a Config.
func NewBuilder() walimpls.Builder { return walimpls.NewBuilder(Name, New) }

// Opener opens channel WALs on one Kafka cluster. It implements
// walimpls.Opener and is safe for concurrent use.
type Opener struct {
	cfg   Config
	tls   *tls.Config
	log   *slog.Logger
	m     *metrics
	admin *kgo.Client
	adm   *kadm.Client
	// limit is the batch limit learned at construction (or configured).
	limit int

	mu     sync.Mutex
	closed bool
	wals   map[*wal]struct{}

	// idMu guards topicIDs: the ID each topic had when this opener last
	// opened or created it (see noteTopicID).
	idMu     sync.Mutex
	topicIDs map[string]topicID
}

var _ walimpls.Opener = (*Opener)(nil)

// New validates cfg, connects to the cluster and returns an Opener. Its
// logs go to walimpls.WithLogger's logger and its metrics
// (streamwal_kafka_*) to walimpls.WithRegisterer's registerer. Unless
// cfg.MaxMessageBytes is set, it asks the brokers for their message size
// limit, so the cluster must be reachable within ctx.
func New(ctx context.Context, cfg Config, opts ...walimpls.Option) (*Opener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	deps := walimpls.ApplyOptions(opts...)
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	logger := deps.Logger.With("wal", Name)
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	o := &Opener{cfg: cfg, tls: tc, log: logger, m: m, wals: map[*wal]struct{}{}, topicIDs: map[string]topicID{}}
	kopts := append(o.baseOpts(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
	)
	kopts = append(kopts, cfg.ClientOptions...)
	o.admin, err = kgo.NewClient(kopts...)
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("kafka: client: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	o.adm = kadm.NewClient(o.admin)
	o.limit, err = o.learnLimit(ctx)
	if err != nil {
		o.admin.Close()
		return nil, err
	}
	return o, nil
}

func (o *Opener) baseOpts() []kgo.Opt { return o.cfg.baseOpts(o.tls, o.log) }

// learnLimit returns the broker-side batch limit new topics get.
func (o *Opener) learnLimit(ctx context.Context) (int, error) {
	if o.cfg.MaxMessageBytes > 0 {
		return o.cfg.MaxMessageBytes, nil
	}
	if v, ok := o.cfg.TopicConfigs["max.message.bytes"]; ok {
		n, _ := strconv.Atoi(v) // validated
		return n, nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.cfg.CreateTimeout)
	defer cancel()
	limit := 0
	err := retry(ctx, func() error {
		brokers, err := o.adm.ListBrokers(ctx)
		if err != nil {
			return err
		}
		rcs, err := o.adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
		if err != nil {
			return err
		}
		limit = 0
		for _, rc := range rcs {
			if rc.Err != nil {
				return rc.Err
			}
			for _, c := range rc.Configs {
				if c.Key != "message.max.bytes" || c.Value == nil {
					continue
				}
				if n, err := strconv.Atoi(*c.Value); err == nil && n > recordOverhead && (limit == 0 || n < limit) {
					limit = n
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, errors.Wrap(err, "kafka: learn message.max.bytes")
	}
	if limit == 0 {
		limit = 1048588 // Kafka's default
	}
	return limit, nil
}

// Capabilities implements walimpls.Opener.
func (o *Opener) Capabilities() walimpls.Capabilities {
	return walimpls.Capabilities{
		Fencing:         !o.cfg.DisableTransactions,
		Durable:         true,
		MaxMessageBytes: o.limit - recordOverhead,
		AtomicBatch:     !o.cfg.DisableTransactions, // one batch, one transaction
	}
}

// UnmarshalID implements walimpls.Opener: IDs are decimal offsets.
func (o *Opener) UnmarshalID(s string) (message.ID, error) { return message.UnmarshalSeqID(Name, s) }

// Close closes every WAL still open and releases the opener. It is
// idempotent.
func (o *Opener) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	wals := make([]*wal, 0, len(o.wals))
	for w := range o.wals {
		wals = append(wals, w)
	}
	o.mu.Unlock()
	for _, w := range wals {
		_ = w.Close()
	}
	o.admin.Close()
	return nil
}

func (o *Opener) forget(w *wal) {
	o.mu.Lock()
	delete(o.wals, w)
	o.mu.Unlock()
}

// Open implements walimpls.Opener. It creates the channel's topic when
// missing; a ReadWrite open then claims the term and fences lower terms as
// the package documentation describes.
func (o *Opener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	if o.isClosed() {
		return nil, errors.Wrap(walimpls.ErrClosed, "kafka: opener closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	topic := o.cfg.topicName(ch.Name)
	var w *wal
	for attempt := 0; w == nil; attempt++ {
		var id topicID
		var err error
		if ch.Mode == walimpls.ReadWrite {
			id, err = o.ensureTopic(ctx, topic)
		} else {
			id, err = o.existingTopic(ctx, topic, ch.Name)
		}
		if err != nil {
			return nil, err
		}
		limit, err := o.topicLimit(ctx, topic)
		if err != nil {
			return nil, err
		}
		w = newWAL(o, ch, topic, id, limit)
		if ch.Mode != walimpls.ReadWrite {
			break
		}
		err = w.startWriter(ctx)
		if err == nil {
			break
		}
		w.shutdown()
		w = nil
		if !errors.Is(err, errDeleting) || attempt >= maxDeletingWaits {
			return nil, err
		}
		// A Delete is under way (another node's, or one whose topic
		// deletion failed): the new channel needs a new topic.
		o.log.Info("the channel is being deleted; waiting for its topic to go", "channel", ch.Name, "topic", topic)
		wctx, cancel := context.WithTimeout(ctx, o.cfg.CreateTimeout)
		err = o.waitTopicGone(wctx, topic, id)
		cancel()
		if err != nil {
			return nil, errmark.Mark(errors.Wrapf(err, "kafka: open channel %q: it is being deleted", ch.Name), errDeleting)
		}
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		w.shutdown()
		return nil, errors.Wrap(walimpls.ErrClosed, "kafka: opener closed")
	}
	o.wals[w] = struct{}{}
	o.mu.Unlock()
	w.log.Debug("opened")
	return w, nil
}

var _ walimpls.Creator = (*Opener)(nil)

// Create implements walimpls.Creator: it creates the channel's topic with
// the configured partitions, replication factor and topic configs when it
// is missing (an existing topic is success, so several processes may
// create one channel at once), and waits until its partitions have leaders.
func (o *Opener) Create(ctx context.Context, name string) error {
	if err := walimpls.ValidateChannelName(name); err != nil {
		return err
	}
	if o.isClosed() {
		return errors.Wrap(walimpls.ErrClosed, "kafka: opener closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := o.ensureTopic(ctx, o.cfg.topicName(name))
	return err
}

func (o *Opener) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// maxDeletingWaits bounds how often an open waits for a dying topic to go
// (each wait is bounded by CreateTimeout).
const maxDeletingWaits = 3

// ensureTopic creates topic when missing, makes sure it has the two
// partitions the backend uses, and returns its ID. It reads the metadata
// from the cluster, never from franz-go's cache: a topic deleted a moment
// ago must be created again, not found in the cache.
func (o *Opener) ensureTopic(ctx context.Context, topic string) (topicID, error) {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.CreateTimeout)
	defer cancel()
	var id topicID
	err := retry(ctx, func() error {
		td, err := o.freshTopic(ctx, topic)
		if err != nil {
			return err
		}
		switch {
		case td.exists && td.err == nil:
			if n := len(td.parts); n < 2 {
				o.log.Warn("adding a partition for term claims", "topic", topic, "partitions", n)
				if _, err := o.adm.CreatePartitions(ctx, 2-n, topic); err != nil && !errors.Is(err, kerr.InvalidPartitions) {
					return err
				}
				return errRetry
			}
			for n, p := range td.parts {
				if n < 2 && (p.err != nil || p.leader < 0) {
					return errRetry
				}
			}
			id = td.id
			return nil
		case td.exists:
			return td.err
		}
		cfgs := make(map[string]*string, len(o.cfg.TopicConfigs))
		for k, v := range o.cfg.TopicConfigs {
			cfgs[k] = &v
		}
		resp, err := o.adm.CreateTopic(ctx, o.cfg.Partitions, o.cfg.ReplicationFactor, cfgs, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			if isFatalAdminErr(err) {
				return errors.Wrapf(errPermanent{err}, "kafka: create topic %q", topic)
			}
			return err
		}
		if err == nil {
			o.log.Info("created topic", "topic", topic)
		} else {
			o.log.Debug("topic exists already (created elsewhere)", "topic", topic)
		}
		return errRetry // re-read the metadata until the partitions have leaders
	})
	if err != nil {
		return topicID{}, err
	}
	o.noteTopicID(topic, id)
	return id, nil
}

// existingTopic returns the ID of topic, the topic of a channel opened
// ReadOnly, and creates nothing: a topic that does not exist (a channel
// never opened ReadWrite, or deleted) is walimpls.ErrNoChannel, so that a
// reader never brings a deleted channel back. A topic that exists but is
// not ready yet (no leader) is waited for, up to CreateTimeout.
func (o *Opener) existingTopic(ctx context.Context, topic, channel string) (topicID, error) {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.CreateTimeout)
	defer cancel()
	var id topicID
	err := retry(ctx, func() error {
		td, err := o.freshTopic(ctx, topic)
		switch {
		case err != nil:
			return err
		case !td.exists:
			return errPermanent{errors.Wrapf(walimpls.ErrNoChannel, "kafka: open channel %q read-only: topic %q does not exist", channel, topic)}
		case td.err != nil:
			return td.err
		}
		for n, p := range td.parts {
			if n < 2 && (p.err != nil || p.leader < 0) {
				return errRetry
			}
		}
		id = td.id
		return nil
	})
	if err != nil {
		return topicID{}, err
	}
	o.noteTopicID(topic, id)
	return id, nil
}

// topicLimit returns the batch limit of topic: the configured one, or the
// topic's max.message.bytes, never above what the opener declared.
func (o *Opener) topicLimit(ctx context.Context, topic string) (int, error) {
	if o.cfg.MaxMessageBytes > 0 {
		return o.cfg.MaxMessageBytes, nil
	}
	limit := o.limit
	err := retry(ctx, func() error {
		rcs, err := o.adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return err
		}
		for _, rc := range rcs {
			if rc.Err != nil {
				return rc.Err
			}
			for _, c := range rc.Configs {
				if c.Key == "max.message.bytes" && c.Value != nil {
					if n, err := strconv.Atoi(*c.Value); err == nil && n > recordOverhead && n < limit {
						limit = n
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, errors.Wrapf(err, "kafka: describe topic %q", topic)
	}
	return limit, nil
}

// errRetry asks retry for another attempt without an error to report.
var errRetry = errors.New("retry")

// errPermanent stops retry.
type errPermanent struct{ error }

func (e errPermanent) Unwrap() error { return e.error }

func isFatalAdminErr(err error) bool {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return !ke.Retriable
	}
	return false
}

// retry calls fn until it returns nil, a permanent error, or ctx ends. It
// backs off from 5ms to 250ms between attempts. When ctx ends, the error
// is ctx's followed by the last attempt's (errRetry aside; an attempt the
// end of ctx cut short counts only if none came before), and errors.Is
// matches either.
func retry(ctx context.Context, fn func() error) error {
	pace := backoff.Config{Initial: 5 * time.Millisecond, Max: 250 * time.Millisecond, NoJitter: true}
	var last error
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		var perm errPermanent
		if errors.As(err, &perm) {
			return err
		}
		if !errors.Is(err, errRetry) && (last == nil || ctx.Err() == nil) {
			last = err
		}
		if err := pace.Wait(ctx, attempt); err != nil {
			if last != nil {
				// fmt.Errorf: cockroachdb/errors v1.13 formats a second
				// %w as %!w and unwraps neither.
				return fmt.Errorf("%w (last attempt: %w)", err, last)
			}
			return err
		}
	}
}
