package adaptor

import (
	"context"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/utility/backoff"
)

// TimeTickAllocator supplies timeticks, for example a cluster-wide TSO. The
// adaptor raises what it returns when needed so that timeticks stay strictly
// increasing per channel and above everything recovered from the log.
type TimeTickAllocator interface {
	Allocate(ctx context.Context) (uint64, error)
}

// Options tune a WAL. The zero value takes every default.
type Options struct {
	// ReadOnly opens the WAL for reading only: no term-begin, no watermarks,
	// appends fail with walimpls.ErrReadOnly, and nobody is fenced.
	ReadOnly bool
	// TimeTickInterval is how often a watermark is appended while the
	// channel is not idle. Default 200ms. It bounds how far readers other
	// than this WAL's own scanners lag behind (see Local releases in the
	// package documentation): lower it for followers that must see appends
	// sooner, at one small record per interval on a busy channel.
	TimeTickInterval time.Duration
	// WatermarkBytes appends a watermark as soon as this many bytes were
	// appended since the last one, and holds appends back while twice as
	// many are not yet covered by one: this bounds what a scanner's reorder
	// buffer must hold, so keep ScannerBufferBytes above twice it. Default
	// 4 MiB.
	WatermarkBytes int
	// Allocator supplies timeticks; default a hybrid logical clock.
	Allocator TimeTickAllocator
	// TimeTickFloor is a timetick every timetick of this WAL is above, on
	// top of those recovered from the log: the writer of a channel whose
	// earlier timeticks live elsewhere sets it (the next segment of a
	// chain: the seal's TimeTick, see package chain). The clock observes
	// it before the term-begin is written, so the first watermark and
	// every append are above it. Zero sets no floor; read-only WALs
	// ignore it.
	TimeTickFloor uint64
	// MaxMessageBytes is the absolute limit of a message, split or not;
	// larger ones are walimpls.ErrTooLarge. Default 16 MiB. Readers must be
	// able to hold one such message: see ScannerBufferBytes.
	MaxMessageBytes int
	// PartBytes is the size of the parts a message is split into; default
	// the backend's limit (Capabilities.MaxMessageBytes). With neither,
	// messages are never split.
	PartBytes int
	// MaxInflightAppends bounds appends in flight (Append, AppendAsync and
	// AppendBatch together); more wait. Default 1024.
	MaxInflightAppends int
	// TailCacheBytes is the budget of the shared buffer of recent
	// messages that tailing scanners read. Default 32 MiB.
	TailCacheBytes int
	// ScannerBufferBytes is the budget of each scanner's reorder buffer
	// (and of the parts of split messages it is joining). A scanner holds
	// at most one message of MaxMessageBytes and what two watermarks'
	// worth of appends bring, so Validate refuses a budget below
	// MaxMessageBytes + 2×WatermarkBytes: a message the writer accepts is
	// always readable. Default 32 MiB.
	ScannerBufferBytes int
	// Retry is the backoff between retries of a retryable append error.
	// Its Clock, when unset, is Clock.
	Retry backoff.Config
	// Clock is the time the WAL schedules by: its periodic watermarks and
	// its retry waits. Default the real clock; tests give a
	// clockwork.FakeClock and advance it instead of sleeping.
	Clock clockwork.Clock
	// Logger receives the WAL's logs, with channel and term attributes;
	// nil discards them, as in every other layer of streamwal.
	Logger *slog.Logger
	// Metrics receives the WAL's metrics; nil records none.
	Metrics *Metrics
	// MetricsChannel is the channel label of the WAL's metrics; empty is
	// the channel's name. A chain's writer (package chainwal) labels its
	// segment's WAL with the chain's channel, so that a channel's series
	// go on across a migration.
	MetricsChannel string
	// OnFirstAppend, when set, is called once per WAL, with the time since
	// Open returned, when the WAL acknowledges its first append (an Append
	// or AppendAsync that succeeded, an AppendBatch that stored at least a
	// prefix): a node times the first append at a new term with it. It
	// runs on the appending goroutine, or on the callback goroutine before
	// the append's callback, and must not block. The WAL owns the event,
	// so nothing needs to wrap the WAL to see it.
	OnFirstAppend func(sinceOpen time.Duration)
}

const (
	defaultTimeTickInterval = 200 * time.Millisecond
	defaultWatermarkBytes   = 4 << 20
	defaultMaxMessageBytes  = 16 << 20
	defaultMaxInflight      = 1024
	defaultTailCacheBytes   = 32 << 20
	defaultScannerBytes     = 32 << 20
	// partOverhead is what a part's reserved properties may take, kept free
	// below the backend's limit.
	partOverhead = 256
)

// Validate reports options no WAL can use.
func (o Options) Validate() error {
	for name, v := range map[string]int64{
		"TimeTickInterval": int64(o.TimeTickInterval), "WatermarkBytes": int64(o.WatermarkBytes),
		"MaxMessageBytes": int64(o.MaxMessageBytes), "PartBytes": int64(o.PartBytes),
		"MaxInflightAppends": int64(o.MaxInflightAppends), "TailCacheBytes": int64(o.TailCacheBytes),
		"ScannerBufferBytes": int64(o.ScannerBufferBytes),
	} {
		if v < 0 {
			return errors.Wrapf(ErrInvalidOptions, "%s is negative (%d)", name, v)
		}
	}
	if o.PartBytes > 0 && o.PartBytes <= 2*partOverhead {
		return errors.Wrapf(ErrInvalidOptions, "PartBytes %d leaves no room for payload (minimum %d)", o.PartBytes, 2*partOverhead+1)
	}
	d := o.withDefaults()
	if need := int64(d.MaxMessageBytes) + 2*int64(d.WatermarkBytes); int64(d.ScannerBufferBytes) < need {
		return errors.Wrapf(ErrInvalidOptions,
			"ScannerBufferBytes %d cannot hold a message of MaxMessageBytes %d and two watermarks' worth of appends (WatermarkBytes %d): at least %d",
			d.ScannerBufferBytes, d.MaxMessageBytes, d.WatermarkBytes, need)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.TimeTickInterval == 0 {
		o.TimeTickInterval = defaultTimeTickInterval
	}
	if o.WatermarkBytes == 0 {
		o.WatermarkBytes = defaultWatermarkBytes
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.MaxInflightAppends == 0 {
		o.MaxInflightAppends = defaultMaxInflight
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = defaultTailCacheBytes
	}
	if o.ScannerBufferBytes == 0 {
		o.ScannerBufferBytes = defaultScannerBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Retry.Clock == nil {
		o.Retry.Clock = o.Clock
	}
	return o
}
