package walmanager

import (
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics carry no channel label, so nothing has to be removed when a
// channel goes away, and 10,000 channels cost 10,000 nothing.
type metrics struct {
	reg         prometheus.Registerer
	transitions *prometheus.CounterVec
	openSeconds prometheus.Histogram
	open        prometheus.Gauge
	collectors  []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Subsystem: "walmanager", Name: "transitions_total",
			Help: "WAL opens and closes and channel deletes done by the manager, by action and result (ok, error, aborted, abandoned).",
		}, []string{"action", "result"}),
		openSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "streamwal", Subsystem: "walmanager", Name: "open_duration_seconds",
			Help:    "Time the WAL opener took, successful or not.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "streamwal", Subsystem: "walmanager", Name: "open_wals",
			Help: "WALs the manager holds open.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.transitions, m.openSeconds, m.open} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, errors.Wrap(err, "walmanager: register metrics")
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

func (m *metrics) unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}
