package retention

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a retainer's series; every method is a no-op without a
// registerer.
type metrics struct {
	reg             prometheus.Registerer
	bytes           *prometheus.GaugeVec
	messages        *prometheus.GaugeVec
	oldestAge       *prometheus.GaugeVec
	segments        *prometheus.GaugeVec
	droppedMessages *prometheus.CounterVec
	droppedBytes    *prometheus.CounterVec
	truncations     *prometheus.CounterVec
	segmentsDeleted prometheus.Counter
	rounds          *prometheus.CounterVec
	roundSeconds    prometheus.Histogram
	collectors      []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "streamwal", "retention"
	m := &metrics{
		reg: reg,
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "bytes",
			Help: "Bytes (payload and properties) of the data messages a channel's log retains, as its owner last measured."}, []string{"channel"}),
		messages: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "messages",
			Help: "Data messages a channel's log retains, as its owner last measured."}, []string{"channel"}),
		oldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "oldest_age_seconds",
			Help: "Age of the oldest data message a channel's log retains (0 when none), as of its owner's last round."}, []string{"channel"}),
		segments: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "segments",
			Help: "Segments a channel's chain keeps."}, []string{"channel"}),
		droppedMessages: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dropped_messages_total",
			Help: "Data messages the retention policy dropped that no consumer had committed on, by channel."}, []string{"channel"}),
		droppedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dropped_bytes_total",
			Help: "Bytes the retention policy dropped that no consumer had committed on, by channel."}, []string{"channel"}),
		truncations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "truncations_total",
			Help: "Truncations of owned channels' logs, by result (ok, error)."}, []string{"result"}),
		segmentsDeleted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "segments_deleted_total",
			Help: "Sealed segments deleted from their backends and dropped from their chains once every checkpoint was past them."}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rounds_total",
			Help: "Retention rounds, by result (ok, error)."}, []string{"result"}),
		roundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "round_seconds",
			Help: "How long a retention round took.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}),
	}
	m.collectors = []prometheus.Collector{m.bytes, m.messages, m.oldestAge, m.segments, m.droppedMessages, m.droppedBytes,
		m.truncations, m.segmentsDeleted, m.rounds, m.roundSeconds}
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

func (m *metrics) round(err error, took time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.rounds.WithLabelValues(result).Inc()
	m.roundSeconds.Observe(took.Seconds())
}

func (m *metrics) measured(s Stats, now time.Time) {
	m.bytes.WithLabelValues(s.Channel).Set(float64(s.Bytes))
	m.messages.WithLabelValues(s.Channel).Set(float64(s.Messages))
	age := 0.0
	if !s.OldestTime.IsZero() {
		age = max(0, now.Sub(s.OldestTime).Seconds())
	}
	m.oldestAge.WithLabelValues(s.Channel).Set(age)
	m.segments.WithLabelValues(s.Channel).Set(float64(len(s.Segments)))
}

func (m *metrics) dropped(channel string, d [2]int64) {
	m.droppedMessages.WithLabelValues(channel).Add(float64(d[0]))
	m.droppedBytes.WithLabelValues(channel).Add(float64(d[1]))
}

// forget removes channel's series.
func (m *metrics) forget(channel string) {
	for _, v := range []*prometheus.GaugeVec{m.bytes, m.messages, m.oldestAge, m.segments} {
		v.DeleteLabelValues(channel)
	}
	m.droppedMessages.DeleteLabelValues(channel)
	m.droppedBytes.DeleteLabelValues(channel)
}
