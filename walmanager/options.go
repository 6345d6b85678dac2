package walmanager

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/adaptor"
)

// WALOpener opens the WAL of a channel at a term; it is the manager's only
// dependency on a backend. adaptor.Open over a walimpls.Opener fits it through
// WALOpenerFunc. It must be safe for concurrent use (different channels open
// in parallel) and should return once ctx ends: the manager cancels an open
// whose state was overtaken, and every open when it closes.
type WALOpener interface {
	Open(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error)
}

// WALOpenerFunc adapts a function to WALOpener.
type WALOpenerFunc func(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error)

// Open calls f.
func (f WALOpenerFunc) Open(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
	return f(ctx, ch)
}

// ChannelDeleter deletes a channel from the backend: walimpls.Opener
// implements it (Opener.Delete), so the opener the WALs come from is the
// usual Options.Deleter.
type ChannelDeleter interface {
	Delete(ctx context.Context, name string) error
}

// DefaultCloseGracePeriod is the CloseGracePeriod of a zero Options.
const DefaultCloseGracePeriod = 10 * time.Second

// Options configures a Manager. The zero value is valid.
type Options struct {
	// CloseGracePeriod bounds how long the manager waits for one WAL Close
	// before abandoning it (logged, and reported as ErrCloseAbandoned in the
	// channel's status). Zero means DefaultCloseGracePeriod; negative is
	// invalid.
	CloseGracePeriod time.Duration
	// Logger receives the manager's logs, with the channel and term as
	// attributes. Nil discards them.
	Logger *slog.Logger
	// Registerer receives the manager's metrics; nil registers none. The
	// metrics are unregistered by Close.
	Registerer prometheus.Registerer
	// Deleter deletes channels from the backend for Manager.Delete; nil
	// makes Delete an error.
	Deleter ChannelDeleter
	// Clock times the close grace period and the open and close durations
	// the manager measures; nil is the real clock. Tests pass a
	// clockwork.FakeClock to step a close past its grace period.
	Clock clockwork.Clock
}

// Validate reports settings no manager can run with.
func (o Options) Validate() error {
	if o.CloseGracePeriod < 0 {
		return errors.Newf("walmanager: negative close grace period %s", o.CloseGracePeriod)
	}
	return nil
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.CloseGracePeriod == 0 {
		o.CloseGracePeriod = DefaultCloseGracePeriod
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	return o
}
