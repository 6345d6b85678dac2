package memory

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Name is the backend's name in configuration and in its IDs.
const Name = "memory"

// Config tunes an Opener. The zero value is ready to use.
type Config struct {
	// MaxMessageBytes limits Message.Size; 0 means no limit.
	MaxMessageBytes int `yaml:"maxMessageBytes"`
	// Cluster is the shared state the Opener is a node of (code only):
	// Openers of one Cluster see the same channels. Nil gives the Opener
	// a cluster of its own.
	Cluster *Cluster `yaml:"-" json:"-"`
}

// Validate reports a config no Opener can use.
func (c Config) Validate() error {
	if c.MaxMessageBytes < 0 {
		return errors.Wrapf(walimpls.ErrInvalidConfig, "memory: negative maxMessageBytes %d", c.MaxMessageBytes)
	}
	return nil
}

// Opener opens WALs on a Cluster; it is one node of that cluster.
type Opener struct {
	cluster *Cluster
	cfg     Config

	mu     sync.Mutex
	closed bool
	wals   map[*wal]struct{}
}

var _ walimpls.Opener = (*Opener)(nil)

// New returns a node of cfg.Cluster. The memory backend neither logs nor
// has metrics: opts are accepted for the shape every backend shares.
func New(ctx context.Context, cfg Config, opts ...walimpls.Option) (*Opener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrap(err, "memory: new opener")
	}
	cluster := cfg.Cluster
	if cluster == nil {
		cluster = NewCluster()
	}
	return &Opener{cluster: cluster, cfg: cfg, wals: map[*wal]struct{}{}}, nil
}

// Capabilities implements walimpls.Opener.
func (o *Opener) Capabilities() walimpls.Capabilities {
	return walimpls.Capabilities{
		Fencing:         o.cluster.FencingEnabled(),
		Durable:         false,
		MaxMessageBytes: o.cfg.MaxMessageBytes,
		AtomicBatch:     true,
	}
}

// UnmarshalID implements walimpls.Opener.
func (o *Opener) UnmarshalID(s string) (message.ID, error) { return message.UnmarshalSeqID(Name, s) }

// Open implements walimpls.Opener.
func (o *Opener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrapf(err, "memory: open %s", ch)
	}
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, errors.Wrapf(walimpls.ErrClosed, "memory: open %s on a closed opener", ch)
	}
	var l *channelLog
	if ch.Mode == walimpls.ReadOnly {
		var ok bool
		if l, ok = o.cluster.lookup(ch.Name); !ok {
			return nil, errors.Wrapf(walimpls.ErrNoChannel, "memory: open %s: the channel does not exist", ch)
		}
	} else {
		l = o.cluster.log(ch.Name)
	}
	var claim uint64
	if ch.Mode == walimpls.ReadWrite {
		fencing := o.cluster.FencingEnabled()
		l.mu.Lock()
		if fencing && ch.Term < l.term {
			cur := l.term
			l.mu.Unlock()
			return nil, &walimpls.FencedError{Channel: ch.Name, Term: ch.Term, CurrentTerm: cur}
		}
		if ch.Term >= l.term {
			// The latest claim of the highest term owns the channel:
			// every earlier writer, of this term too, is fenced from now.
			if ch.Term > l.term {
				l.term, l.claim = ch.Term, 0
			}
			l.claim++
			claim = l.claim
		}
		l.mu.Unlock()
	}
	w := newWAL(o, l, ch, claim)
	o.wals[w] = struct{}{}
	return w, nil
}

// Delete implements walimpls.Opener: the channel's log goes at once, for
// every Opener of the cluster.
func (o *Opener) Delete(ctx context.Context, name string) error {
	if err := walimpls.ValidateChannelName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return errors.Wrapf(err, "memory: delete %q", name)
	}
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return errors.Wrapf(walimpls.ErrClosed, "memory: delete %q on a closed opener", name)
	}
	o.cluster.deleteLog(name)
	return nil
}

// Close closes the opener and every WAL it opened. Idempotent.
func (o *Opener) Close() error {
	o.mu.Lock()
	o.closed = true
	wals := o.wals
	o.wals = map[*wal]struct{}{}
	o.mu.Unlock()
	for w := range wals {
		_ = w.Close()
	}
	return nil
}

func (o *Opener) forget(w *wal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.wals, w)
}

// NewBuilder returns the memory backend's walimpls.Builder, whose Openers
// share cluster: its BuildParams Config decodes into a Config, whose
// Cluster it sets.
func NewBuilder(cluster *Cluster) walimpls.Builder {
	return walimpls.NewBuilder(Name, func(ctx context.Context, cfg Config, opts ...walimpls.Option) (*Opener, error) {
		cfg.Cluster = cluster
		return New(ctx, cfg, opts...)
	})
}
