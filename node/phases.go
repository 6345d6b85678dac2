package node

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// phases.go times what a node does when it gets a channel: the backend's
// open (which fences every lower term), the rest of the WAL's open (the
// end of the log found, the term-begin and a first watermark written), and
// the first append acknowledged at the new term. The coordinator's
// metrics time what comes before (detect, decide); the Opened report
// carries these times, so a move can be followed end to end.

// openTimes is one successful open of a WAL.
type openTimes struct {
	term   int64
	fenced time.Time // the backend's open returned
	ready  time.Time // the WAL's open returned
}

// phases keeps the times of the latest open of each channel until the
// follower takes them, and the histograms. Safe for concurrent use.
type phases struct {
	open        *prometheus.HistogramVec // by phase: fence, tail
	firstAppend prometheus.Histogram

	mu    sync.Mutex
	opens map[string]openTimes // by channel: the latest open, until taken (at most one per channel)
}

func newPhases() *phases {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 15) // 1 ms to 16 s
	return &phases{
		open: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "open_phase_seconds", Buckets: buckets,
			Help: "Opens of assigned channels by phase: fence (assignment seen to the backend's open, which fences lower terms, returned), tail (to the WAL ready: end of the log found, term-begin written)."},
			[]string{"phase"}),
		firstAppend: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "streamwal", Subsystem: "node",
			Name: "first_append_seconds", Buckets: buckets,
			Help: "From a channel's WAL ready at a new term to the first append acknowledged at that term."}),
		opens: map[string]openTimes{},
	}
}

func (p *phases) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.open, p.firstAppend}
}

// openWAL opens a channel's WAL through adaptor.Open, timing the
// backend's open, and wraps it to time its first append.
// channel is the channel's name in the cluster, which ch (the backend
// channel) shares unless the channel is a chain past its first segment.
func (p *phases) openWAL(ctx context.Context, channel string, opener walimpls.Opener, ch adaptor.Channel, opts adaptor.Options) (adaptor.WAL, error) {
	timed := &timedOpener{Opener: opener}
	w, err := adaptor.Open(ctx, timed, ch, opts)
	if err != nil {
		return nil, err
	}
	ready := time.Now()
	p.mu.Lock()
	p.opens[channel] = openTimes{term: ch.Term, fenced: timed.fenced, ready: ready}
	p.mu.Unlock()
	fw := &firstAppendWAL{WAL: w, ready: ready, observe: p.firstAppend}
	fw.pending.Store(true)
	return fw, nil
}

// take returns the times of the open of ch at term, once, and records
// them: fence from seen (when the follower saw the assignment).
func (p *phases) take(ch string, term int64, seen time.Time) (openTimes, bool) {
	p.mu.Lock()
	t, ok := p.opens[ch]
	if ok && t.term == term {
		delete(p.opens, ch)
	}
	p.mu.Unlock()
	if !ok || t.term != term {
		return openTimes{}, false
	}
	if !t.fenced.IsZero() {
		p.open.WithLabelValues("fence").Observe(t.fenced.Sub(seen).Seconds())
		p.open.WithLabelValues("tail").Observe(t.ready.Sub(t.fenced).Seconds())
	}
	return t, true
}

// timedOpener notes when the backend's open of a channel returned. One
// per adaptor.Open; the adaptor only calls Open, Capabilities and
// UnmarshalID on it.
type timedOpener struct {
	walimpls.Opener
	fenced time.Time
}

func (o *timedOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	impl, err := o.Opener.Open(ctx, ch)
	o.fenced = time.Now()
	return impl, err
}

// firstAppendWAL observes the time from its WAL's open to its first
// acknowledged append.
type firstAppendWAL struct {
	adaptor.WAL
	ready   time.Time
	pending atomic.Bool
	observe prometheus.Observer
}

var _ adaptor.AsyncAnswerer = (*firstAppendWAL)(nil)

func (w *firstAppendWAL) acked() {
	if w.pending.Load() && w.pending.CompareAndSwap(true, false) {
		w.observe.Observe(time.Since(w.ready).Seconds())
	}
}

func (w *firstAppendWAL) Append(ctx context.Context, m message.Message) (adaptor.AppendResult, error) {
	r, err := w.WAL.Append(ctx, m)
	if err == nil {
		w.acked()
	}
	return r, err
}

func (w *firstAppendWAL) AppendBatch(ctx context.Context, msgs []message.Message) ([]adaptor.AppendResult, error) {
	r, err := w.WAL.AppendBatch(ctx, msgs)
	if len(r) > 0 {
		w.acked()
	}
	return r, err
}

func (w *firstAppendWAL) AppendAsync(ctx context.Context, m message.Message, cb func(adaptor.AppendResult, error)) {
	w.WAL.AppendAsync(ctx, m, func(r adaptor.AppendResult, err error) {
		if err == nil {
			w.acked()
		}
		if cb != nil {
			cb(r, err)
		}
	})
}

// AnswerAsync forwards to the WAL's adaptor.AsyncAnswerer, which embedding
// alone would hide.
func (w *firstAppendWAL) AnswerAsync(cb func(adaptor.AppendResult, error), r adaptor.AppendResult, err error) {
	adaptor.AnswerAsync(w.WAL, cb, r, err)
}
