package pulsar

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Name is the backend's name in configuration and in its message IDs.
const Name = "pulsar"

// NewBuilder returns the Pulsar backend's walimpls.Builder. Its BuildParams
// Config decodes into a Config.
func NewBuilder() walimpls.Builder { return walimpls.NewBuilder(Name, New) }

// Opener opens channel WALs on one Pulsar cluster. It implements
// walimpls.Opener and is safe for concurrent use.
type Opener struct {
	cfg Config
	log *slog.Logger
	reg prometheus.Registerer // nil: every client gets a private registry
	// client is shared by scanners, meta-topic reads and writes and
	// truncation consumers; every WAL producer has its own client.
	client pulsar.Client
	// brokerMax is the broker's maximum message size.
	brokerMax int

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close
	wals    map[*wal]struct{}
	// bg counts the goroutines that run a client call for a caller that
	// may stop waiting (Last) or withdraw a producer creation (withdraw);
	// Close closes the client and closing, which ends them, and waits.
	// Added to under mu while not closed.
	bg sync.WaitGroup

	hooks testHooks
}

// testHooks let this package's tests step in between the stages of an
// open. Every field is nil outside tests; set them before the first Open.
type testHooks struct {
	// beforeClaim runs in a ReadWrite open after the opening fold found
	// no higher term, before the open subscribes, watches and claims.
	beforeClaim func(ctx context.Context, w *wal)
	// afterDeletionRecord runs in Delete once the deletion record is
	// written (or found unneeded); beforeDeleteTopics once the channel is
	// fenced, before its topics are deleted.
	afterDeletionRecord func(ctx context.Context, name string)
	beforeDeleteTopics  func(ctx context.Context, name string)
}

var _ walimpls.Opener = (*Opener)(nil)

// New validates cfg, connects to the cluster and returns an Opener. Unless
// cfg.MaxMessageBytes is set, it asks the broker for its maximum message
// size, so the cluster must be reachable within ctx. Its logs go to
// walimpls.WithLogger's logger, the clients' metrics to
// walimpls.WithRegisterer's registerer (none: nowhere).
func New(ctx context.Context, cfg Config, opts ...walimpls.Option) (*Opener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	deps := walimpls.ApplyOptions(opts...)
	cfg = cfg.withDefaults()
	if cfg.AdminURL != "" {
		// The admin API provides every topic operation that no hook
		// provides.
		a, err := newAdminClient(&cfg)
		if err != nil {
			return nil, err
		}
		if cfg.TakeOver == nil {
			cfg.TakeOver = a.unload
		}
		if cfg.DeleteTopic == nil {
			cfg.DeleteTopic = a.deleteTopic
		}
		if cfg.TopicExists == nil {
			cfg.TopicExists = a.topicExists
		}
	}
	o := &Opener{cfg: cfg, log: deps.Logger.With("wal", Name), reg: deps.Registerer, wals: map[*wal]struct{}{}, closing: make(chan struct{})}
	o.brokerMax = cfg.MaxMessageBytes
	if o.brokerMax == 0 {
		n, err := probeMaxMessageSize(ctx, &o.cfg)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if n <= 2*frameOverhead {
			return nil, errors.Newf("pulsar: broker max message size %d is below the framing overhead", n)
		}
		o.brokerMax = n
	}
	cl, err := o.newClient()
	if err != nil {
		return nil, err
	}
	o.client = cl
	return o, nil
}

// newClient returns a client with the configured connection settings.
func (o *Opener) newClient() (pulsar.Client, error) {
	c := &o.cfg
	reg := o.reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	opts := pulsar.ClientOptions{
		URL:                        c.ServiceURL,
		ConnectionTimeout:          c.ConnectionTimeout,
		OperationTimeout:           c.OperationTimeout,
		TLSTrustCertsFilePath:      c.TLS.TrustCertsFile,
		TLSAllowInsecureConnection: c.TLS.AllowInsecureConnection,
		TLSValidateHostname:        c.TLS.ValidateHostname,
		Logger:                     plog.NewLoggerWithSlog(slog.New(minLevel{h: o.log.Handler(), min: slog.LevelWarn})),
		MetricsRegisterer:          reg,
	}
	if c.AuthToken != "" {
		opts.Authentication = pulsar.NewAuthenticationToken(c.AuthToken)
	}
	cl, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("pulsar: client: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	return cl, nil
}

// minLevel drops records below min: the client logs every connection and
// producer change at info level.
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}
func (m minLevel) Handle(ctx context.Context, r slog.Record) error { return m.h.Handle(ctx, r) }
func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h: m.h.WithAttrs(as), min: m.min}
}
func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h: m.h.WithGroup(name), min: m.min}
}

// Capabilities implements walimpls.Opener.
func (o *Opener) Capabilities() walimpls.Capabilities {
	return walimpls.Capabilities{
		Fencing:         true,
		Durable:         true,
		MaxMessageBytes: declaredMax(o.brokerMax),
		// The client decides where a batch's messages split into broker
		// entries; see the package documentation.
		AtomicBatch: false,
	}
}

// UnmarshalID implements walimpls.Opener.
func (o *Opener) UnmarshalID(s string) (message.ID, error) { return unmarshalID(s) }

// Close closes every WAL still open and releases the opener. It is
// idempotent.
func (o *Opener) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	close(o.closing)
	wals := make([]*wal, 0, len(o.wals))
	for w := range o.wals {
		wals = append(wals, w)
	}
	o.mu.Unlock()
	for _, w := range wals {
		_ = w.Close()
	}
	// Background calls into the shared client (Last's lookups) finish
	// before it closes: pulsar-client-go never answers a request that its
	// consumer queued just before the client closed, and the call would
	// then wait for ever. The client's own timeouts bound them while it is
	// open.
	bg := make(chan struct{})
	go func() {
		o.bg.Wait()
		close(bg)
	}()
	bound := o.cfg.OperationTimeout + o.cfg.ConnectionTimeout
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-bg:
	case <-timer.C:
		o.log.Warn("background calls still running after the client's timeouts; closing the client under them", "waited", bound)
	}
	o.client.Close()
	timer.Reset(bound)
	select {
	case <-bg:
	case <-timer.C:
		o.log.Error("abandoning background calls the closed client never answered", "waited", bound)
	}
	return nil
}

// goBackground runs fn on a goroutine that Close waits for; false (fn not
// run) once the opener is closed.
func (o *Opener) goBackground(fn func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		fn()
	}()
	return true
}

// lastMessage asks the broker for the last message id of topic through a
// reader of the shared client; ok is false when the topic holds no message
// or does not exist.
func (o *Opener) lastMessage(topic string) (id msgID, ok bool, err error) {
	r, err := o.client.CreateReader(pulsar.ReaderOptions{
		Topic:             topic,
		StartMessageID:    pulsar.LatestMessageID(),
		ReceiverQueueSize: 1,
	})
	if err != nil {
		if strings.Contains(err.Error(), "TopicNotFound") {
			return msgID{}, false, nil
		}
		return msgID{}, false, err
	}
	defer r.Close()
	last, err := r.GetLastMessageID()
	if err != nil {
		return msgID{}, false, err
	}
	id, ok = lastOf(last)
	return id, ok, nil
}

var _ walimpls.Creator = (*Opener)(nil)

// Create implements walimpls.Creator: it attaches the durable subscription
// (Config.Subscription) to the channel's log and meta topics, which makes
// a broker that creates topics on use create them, and keeps their
// messages from retention from the first one on. Existing topics and
// subscriptions are left as they are. With topic auto-creation off, create
// the topics with the admin API first.
func (o *Opener) Create(ctx context.Context, name string) error {
	if err := walimpls.ValidateChannelName(name); err != nil {
		return err
	}
	if o.isClosed() {
		return errors.Wrap(walimpls.ErrClosed, "pulsar: opener closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, t := range []string{o.cfg.topicName(name), o.cfg.metaTopicName(name)} {
		if err := o.ensureSubscription(ctx, t); err != nil {
			return errors.Wrapf(err, "pulsar: create channel %q", name)
		}
	}
	return nil
}

func (o *Opener) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

func (o *Opener) forget(w *wal) {
	o.mu.Lock()
	delete(o.wals, w)
	o.mu.Unlock()
}

// mustExist refuses a ReadOnly open of a channel whose meta topic does not
// exist (never opened ReadWrite, or deleted) with walimpls.ErrNoChannel,
// before a reader of it would make a broker that creates topics on use
// create it. Without Config.TopicExists (or AdminURL) it cannot tell, and
// lets the open go on.
func (o *Opener) mustExist(ctx context.Context, metaTopic string, ch walimpls.Channel) error {
	exists := o.cfg.TopicExists
	if exists == nil {
		return nil
	}
	ok, err := exists(ctx, metaTopic)
	if err != nil {
		return errors.Wrapf(err, "pulsar: open %s: does topic %s exist", ch, metaTopic)
	}
	if !ok {
		return errors.Wrapf(walimpls.ErrNoChannel, "pulsar: open %s: the channel does not exist (no topic %s)", ch, metaTopic)
	}
	return nil
}

// Open implements walimpls.Opener. A ReadWrite open claims the term and
// takes the channel's topic over as the package documentation describes.
func (o *Opener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	if o.isClosed() {
		return nil, errors.Wrap(walimpls.ErrClosed, "pulsar: opener closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := newWAL(o, ch)
	if ch.Mode == walimpls.ReadOnly {
		if err := o.mustExist(ctx, w.metaTopic, ch); err != nil {
			return nil, err
		}
	}
	st, err := o.readMeta(ctx, w.metaTopic, "")
	if err != nil {
		return nil, err
	}
	if st.deleted {
		return nil, errors.Wrapf(deletedError(ch.Name, ch.Term),
			"pulsar: open %s: a deletion of the channel has not finished; delete it again to use the name", ch)
	}
	w.setTrunc(st.trunc, st.hasTrunc)
	if ch.Mode == walimpls.ReadWrite {
		err = w.startWriter(ctx, st)
	} else {
		err = w.startWatcher(st)
	}
	if err != nil {
		w.shutdown()
		return nil, err
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		w.shutdown()
		return nil, errors.Wrap(walimpls.ErrClosed, "pulsar: opener closed")
	}
	o.wals[w] = struct{}{}
	o.mu.Unlock()
	w.log.Debug("opened")
	return w, nil
}
