package s3

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// NewBuilder returns the S3 backend's walimpls.Builder: its BuildParams
// Config decodes into a Config.
func NewBuilder() walimpls.Builder { return walimpls.NewBuilder(Name, New) }

// Opener opens channels of one bucket and prefix. It implements
// walimpls.Opener and is safe for concurrent use.
type Opener struct {
	cfg     Config
	keys    keys
	st      *store
	log     *slog.Logger
	m       *metrics
	clock   clockwork.Clock
	fencing bool
	arena   recordArena // the buffers of appends' records' heads
	// bodyBufs are the flushes' send buffers (bodyReader.WriteTo).
	bodyBufs sync.Pool

	mu     sync.Mutex
	closed bool
	wals   map[*wal]struct{}
	hubs   map[string]*hub
}

var _ walimpls.Opener = (*Opener)(nil)

// New validates cfg, checks the bucket and proves that the store honours
// conditional writes (unless cfg.Unfenced), and returns an Opener. Its
// logs go to walimpls.WithLogger's logger, its metrics (streamwal_s3_*)
// to walimpls.WithRegisterer's registerer.
func New(ctx context.Context, cfg Config, opts ...walimpls.Option) (*Opener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrap(err, "s3: new opener")
	}
	cfg = cfg.withDefaults()
	deps := walimpls.ApplyOptions(opts...)
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, errors.Wrap(err, "s3: register metrics")
	}
	client, owned, err := newClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "AWS S3 " + cfg.Region
	}
	where := fmt.Sprintf("endpoint %s bucket %q", endpoint, cfg.Bucket)
	o := &Opener{
		cfg: cfg, keys: keys{prefix: cfg.Prefix}, log: deps.Logger.With("wal", Name),
		st: &store{c: client, owned: owned, bucket: cfg.Bucket, where: where, m: m},
		m:  m, clock: deps.Clock, fencing: !cfg.Unfenced,
		wals: map[*wal]struct{}{}, hubs: map[string]*hub{},
	}
	if err := o.checkBucket(ctx); err != nil {
		o.st.closeIdle()
		return nil, err
	}
	if cfg.Unfenced {
		m.probe.Set(-1)
		o.log.Warn("unfenced: the store's conditional writes are not proven, and the backend declares no fencing; run a single writer per channel",
			"endpoint", endpoint, "bucket", cfg.Bucket)
		return o, nil
	}
	if err := o.probe(ctx); err != nil {
		o.st.closeIdle()
		return nil, err
	}
	o.log.Debug("the store honours conditional writes", "endpoint", endpoint, "bucket", cfg.Bucket, "racers", cfg.ProbeRacers)
	return o, nil
}

// Capabilities implements walimpls.Opener.
func (o *Opener) Capabilities() walimpls.Capabilities {
	return walimpls.Capabilities{
		Fencing:         o.fencing,
		Durable:         true,
		MaxMessageBytes: o.cfg.MaxMessageBytes,
		AtomicBatch:     true,
	}
}

// UnmarshalID implements walimpls.Opener: "<epoch>.<slot>.<index>", in
// canonical decimal only.
func (o *Opener) UnmarshalID(s string) (message.ID, error) { return unmarshalID(s) }

// Open implements walimpls.Opener (see the package doc, "Opening
// ReadWrite at term T").
func (o *Opener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	if o.isClosed() {
		return nil, errors.Wrapf(walimpls.ErrClosed, "s3: open %s on a closed opener", ch)
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "s3: open %s", ch)
	}
	var (
		m     *manifest
		epoch epochEntry
		err   error
	)
	if ch.Mode == walimpls.ReadOnly {
		m, _, err = o.getManifest(ctx, ch.Name)
		switch {
		case errors.Is(err, errNotFound):
			return nil, errors.Wrapf(walimpls.ErrNoChannel, "s3: open %s: no manifest", ch)
		case err != nil:
			return nil, errors.Wrapf(err, "s3: open %s", ch)
		case m.Deleted:
			return nil, errors.Wrapf(walimpls.ErrNoChannel, "s3: open %s: the channel was deleted", ch)
		}
	} else {
		epoch, m, err = o.claim(ctx, ch)
		if err != nil {
			return nil, err
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, errors.Wrapf(walimpls.ErrClosed, "s3: open %s on a closed opener", ch)
	}
	h := o.hubs[ch.Name]
	if h == nil {
		h = newHub(o, ch.Name)
		o.hubs[ch.Name] = h
	}
	h.refs++
	h.noteManifest(m)
	w := newWAL(o, h, ch, epoch)
	o.wals[w] = struct{}{}
	return w, nil
}

// forget drops a closed WAL, and its channel's hub with the last one.
func (o *Opener) forget(w *wal) {
	o.mu.Lock()
	delete(o.wals, w)
	h := w.hub
	h.refs--
	last := h.refs == 0 && o.hubs[w.ch.Name] == h
	if last {
		delete(o.hubs, w.ch.Name)
	}
	o.mu.Unlock()
	if last {
		h.close()
		o.m.buffered.DeleteLabelValues(w.ch.Name)
	}
}

func (o *Opener) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// walsOf returns the open WALs of a channel.
func (o *Opener) walsOf(name string) []*wal {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ws []*wal
	for w := range o.wals {
		if w.ch.Name == name {
			ws = append(ws, w)
		}
	}
	return ws
}

// hubOf returns the channel's hub, nil when no WAL of it is open.
func (o *Opener) hubOf(name string) *hub {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hubs[name]
}

// Close closes every WAL of the Opener and their scanners. Idempotent.
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
	o.st.closeIdle()
	return nil
}
