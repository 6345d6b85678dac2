package adaptor

import (
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/atomic"
)

// Metrics are the adaptor's Prometheus metrics, shared by every WAL of a
// process. Each series carries the channel; a WAL's series are deleted when
// it closes.
type Metrics struct {
	appends        *prometheus.CounterVec
	appendBytes    *prometheus.CounterVec
	appendLatency  *prometheus.HistogramVec
	retries        *prometheus.CounterVec
	scanners       *prometheus.GaugeVec
	reorderBytes   *prometheus.GaugeVec
	tailCacheBytes *prometheus.GaugeVec
	fenced         *prometheus.CounterVec
	dropped        *prometheus.CounterVec
	watermarks     *prometheus.CounterVec
	fallbacks      *prometheus.CounterVec
	collectorsList []prometheus.Collector
}

// Reasons a scanner drops a message, the "reason" label of
// streamwal_scanner_dropped_total.
const (
	dropStaleTerm     = "stale_term"
	dropLate          = "late"
	dropDuplicate     = "duplicate"
	dropPartDuplicate = "part_duplicate"
	dropPartOrphan    = "part_orphan"
	dropMalformed     = "malformed"
)

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	ch := []string{"channel"}
	m := &Metrics{
		appends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Name: "appends_total", Help: "Appends acknowledged, by channel.",
		}, ch),
		appendBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Name: "append_bytes_total", Help: "Bytes of acknowledged appends.",
		}, ch),
		appendLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "streamwal", Name: "append_latency_seconds", Help: "Latency of Append, retries included.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
		}, []string{"channel", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Name: "append_retries_total", Help: "Backend appends retried after a retryable error.",
		}, ch),
		scanners: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "streamwal", Name: "scanners", Help: "Live scanners by mode (catchup, tailing).",
		}, []string{"channel", "mode"}),
		reorderBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "streamwal", Name: "scanner_buffer_bytes", Help: "Bytes held in scanners' reorder buffers.",
		}, ch),
		tailCacheBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			// The metric keeps the name it was published under (dashboards
			// read it); it measures the tail cache.
			Namespace: "streamwal", Name: "write_ahead_buffer_bytes", Help: "Bytes held in the shared tail cache of recent messages.",
		}, ch),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Name: "fenced_total", Help: "WALs made unavailable by a higher term.",
		}, ch),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Name: "scanner_dropped_total",
			Help: "Messages scanners dropped on purpose: stale_term, late, duplicate, part_duplicate, part_orphan, malformed.",
		}, []string{"channel", "reason"}),
		watermarks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Name: "watermarks_total", Help: "Timetick watermarks appended.",
		}, ch),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Name: "scanner_fallbacks_total",
			Help: "Tailing scanners that fell behind the tail cache and went back to reading the backend.",
		}, ch),
	}
	m.collectorsList = []prometheus.Collector{m.appends, m.appendBytes, m.appendLatency, m.retries, m.scanners,
		m.reorderBytes, m.tailCacheBytes, m.fenced, m.dropped, m.watermarks, m.fallbacks}
	for _, c := range m.collectorsList {
		if err := reg.Register(c); err != nil {
			return nil, errors.Wrap(err, "adaptor: register metrics")
		}
	}
	return m, nil
}

// forget deletes every series of a channel.
func (m *Metrics) forget(channel string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"channel": channel}
	for _, c := range m.collectorsList {
		if v, ok := c.(interface {
			DeletePartialMatch(prometheus.Labels) int
		}); ok {
			v.DeletePartialMatch(l)
		}
	}
}

// The parts of a series a WAL records to: satisfied by Prometheus's
// counters and gauges, and by nop.
type (
	counter interface {
		Inc()
		Add(float64)
	}
	gauge interface {
		counter
		Set(float64)
		Dec()
		Sub(float64)
	}
)

// nop records nothing: the series of a WAL opened without Metrics, which
// then costs no registry and no series of its own.
type nop struct{}

func (nop) Inc()        {}
func (nop) Add(float64) {}
func (nop) Set(float64) {}
func (nop) Dec()        {}
func (nop) Sub(float64) {}

// lazyObserver is a histogram series created at its first observation: a
// channel that never appended (or never failed to) exports no buckets of
// zeros for it. Once dropped (the channel's series forgotten) it creates
// nothing more.
type lazyObserver struct {
	vec    *prometheus.HistogramVec
	labels []string
	obs    atomic.Pointer[prometheus.Observer]
	mu     sync.Mutex // guards creating obs, and gone
	gone   bool
}

func (l *lazyObserver) Observe(v float64) {
	if o := l.obs.Load(); o != nil {
		(*o).Observe(v)
		return
	}
	l.mu.Lock()
	if l.gone {
		l.mu.Unlock()
		return
	}
	o := l.obs.Load()
	if o == nil {
		obs := l.vec.WithLabelValues(l.labels...)
		o = &obs
		l.obs.Store(o)
	}
	l.mu.Unlock()
	(*o).Observe(v)
}

// drop stops the series from being created again once forgotten.
func (l *lazyObserver) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone = true
}

// walMetrics are one channel's series.
type walMetrics struct {
	parent         *Metrics // nil: nothing is recorded
	channel        string
	appendsOK      counter
	appendBytes    counter
	latencyOK      *lazyObserver
	latencyErr     *lazyObserver
	retries        counter
	fenced         counter
	watermarks     counter
	tailCacheBytes gauge
	scanBytes      gauge
	fallbacks      counter
}

func newWALMetrics(m *Metrics, channel string) walMetrics {
	if m == nil {
		var n nop
		return walMetrics{channel: channel, appendsOK: n, appendBytes: n,
			retries: n, fenced: n, watermarks: n, tailCacheBytes: n, scanBytes: n, fallbacks: n}
	}
	return walMetrics{
		parent:         m,
		channel:        channel,
		appendsOK:      m.appends.WithLabelValues(channel),
		appendBytes:    m.appendBytes.WithLabelValues(channel),
		latencyOK:      &lazyObserver{vec: m.appendLatency, labels: []string{channel, "ok"}},
		latencyErr:     &lazyObserver{vec: m.appendLatency, labels: []string{channel, "error"}},
		retries:        m.retries.WithLabelValues(channel),
		fenced:         m.fenced.WithLabelValues(channel),
		watermarks:     m.watermarks.WithLabelValues(channel),
		tailCacheBytes: m.tailCacheBytes.WithLabelValues(channel),
		scanBytes:      m.reorderBytes.WithLabelValues(channel),
		fallbacks:      m.fallbacks.WithLabelValues(channel),
	}
}

func (m walMetrics) observe(start time.Time, size int, err error) {
	if m.parent == nil {
		return
	}
	if err != nil {
		m.latencyErr.Observe(time.Since(start).Seconds())
		return
	}
	m.appendsOK.Inc()
	m.appendBytes.Add(float64(size))
	m.latencyOK.Observe(time.Since(start).Seconds())
}

func (m walMetrics) scanners(mode string) gauge {
	if m.parent == nil {
		return nop{}
	}
	return m.parent.scanners.WithLabelValues(m.channel, mode)
}

func (m walMetrics) dropped(reason string) counter {
	if m.parent == nil {
		return nop{}
	}
	return m.parent.dropped.WithLabelValues(m.channel, reason)
}

func (m walMetrics) forget() {
	if m.parent == nil {
		return
	}
	m.latencyOK.drop()
	m.latencyErr.drop()
	m.parent.forget(m.channel)
}
