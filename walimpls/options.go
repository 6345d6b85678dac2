package walimpls

import (
	"log/slog"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
)

// Option sets what every backend's constructor takes besides its own
// Config. Every backend is built the same way:
//
//	New(ctx context.Context, cfg Config, opts ...walimpls.Option)
//
// What every backend may need and is not configuration (logger, metrics,
// clock) comes as an Option; a dependency of one backend alone (local's
// file system, memory's cluster, S3's credentials provider) is a
// code-only field of its Config.
type Option func(*Deps)

// Deps are what Options set.
type Deps struct {
	// Logger receives the backend's logs; never nil after ApplyOptions
	// (the default discards them).
	Logger *slog.Logger
	// Registerer receives the backend's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Clock times what the backend schedules (flushes, syncs, polls,
	// backoffs); never nil after ApplyOptions (the default is the real
	// clock). Tests pass a clockwork.FakeClock and advance it instead of
	// sleeping.
	Clock clockwork.Clock
}

// WithLogger sends the backend's logs to l; nil discards them (the
// default).
func WithLogger(l *slog.Logger) Option { return func(d *Deps) { d.Logger = l } }

// WithRegisterer registers the backend's metrics with r; nil registers none
// (the default).
func WithRegisterer(r prometheus.Registerer) Option { return func(d *Deps) { d.Registerer = r } }

// WithClock times the backend's schedules on c; nil is the real clock
// (the default).
func WithClock(c clockwork.Clock) Option { return func(d *Deps) { d.Clock = c } }

// ApplyOptions returns the Deps opts set, with the defaults for what they
// leave unset. Backends call it in their constructor.
func ApplyOptions(opts ...Option) Deps {
	var d Deps
	for _, opt := range opts {
		if opt != nil {
			opt(&d)
		}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Clock == nil {
		d.Clock = clockwork.NewRealClock()
	}
	return d
}
