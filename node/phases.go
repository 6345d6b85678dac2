package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/adaptor"
)

// phases.go times what a node does when it gets a channel: the backend's
// open (which fences every lower term), the rest of the WAL's open (the
// end of the log found, the term-begin and a first watermark written), and
// the first append acknowledged at the new term. The coordinator's
// metrics time what comes before (detect, decide); the Opened report
// carries these times, so a move can be followed end to end.

// phases holds the histograms. The times are the WAL's own: the adaptor
// calls the first-append hook (adaptor.Options.OnFirstAppend) and the
// opened WAL carries its open's times (adaptor.OpenTimes), which the
// follower reads from it once the open succeeded.
type phases struct {
	open        *prometheus.HistogramVec // by phase: fence, tail
	firstAppend prometheus.Histogram
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
	}
}

func (p *phases) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.open, p.firstAppend}
}

// onFirstAppend returns the WAL hook that times first appends, calling
// also the hook the node's configuration set, if any.
func (p *phases) onFirstAppend(also func(time.Duration)) func(time.Duration) {
	return func(d time.Duration) {
		p.firstAppend.Observe(d.Seconds())
		if also != nil {
			also(d)
		}
	}
}

// opened records the phases of an open with times t: fence from seen
// (when the follower saw the assignment).
func (p *phases) opened(seen time.Time, t adaptor.OpenTimes) {
	if t.Fenced.IsZero() {
		return
	}
	p.open.WithLabelValues("fence").Observe(t.Fenced.Sub(seen).Seconds())
	p.open.WithLabelValues("tail").Observe(t.Ready.Sub(t.Fenced).Seconds())
}
