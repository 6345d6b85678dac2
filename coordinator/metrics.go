package coordinator

import (
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics carry no channel label: a cluster's size does not multiply its
// series.
type metrics struct {
	reg       prometheus.Registerer
	leader    prometheus.Gauge
	moves     *prometheus.CounterVec
	assigning prometheus.Gauge
	overdue   prometheus.Gauge
	failed    *prometheus.CounterVec

	registered []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reg: reg,
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "streamwal", Subsystem: "coordinator", Name: "leader",
			Help: "1 while this coordinator leads (its writes carry its election fence), else 0.",
		}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Subsystem: "coordinator", Name: "moves_total",
			Help: "Assignments written with a new owner, by reason (new, owner_lost, drain, request, open_timeout).",
		}, []string{"reason"}),
		assigning: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "streamwal", Subsystem: "coordinator", Name: "assigning_channels",
			Help: "Managed channels whose owner has not confirmed the open yet, as the leader last saw them (0 when not leading).",
		}),
		overdue: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "streamwal", Subsystem: "coordinator", Name: "overdue_channels",
			Help: "Managed channels Assigning for longer than the open timeout, as the leader last saw them (0 when not leading).",
		}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "streamwal", Subsystem: "coordinator", Name: "failed_writes_total",
			Help: "Writes that did not apply, by cause: conflict (a key changed since the read), deposed (no longer leader), unknown (no answer).",
		}, []string{"cause"}),
	}
	for _, r := range reasons {
		m.moves.WithLabelValues(string(r))
	}
	for _, c := range []string{"conflict", "deposed", "unknown"} {
		m.failed.WithLabelValues(c)
	}
	return m
}

// register puts the metrics on the registerer (if any); unregister takes
// them off.
func (m *metrics) register() error {
	if m.reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{m.leader, m.moves, m.assigning, m.overdue, m.failed} {
		if err := m.reg.Register(c); err != nil {
			m.unregister()
			return errors.Wrap(err, "coordinator: register metrics")
		}
		m.registered = append(m.registered, c)
	}
	return nil
}

func (m *metrics) unregister() {
	for _, c := range m.registered {
		m.reg.Unregister(c)
	}
	m.registered = nil
}
