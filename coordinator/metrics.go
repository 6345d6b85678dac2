package coordinator

import (
	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics carry no channel label: a cluster's size does not multiply its
// series.

// Outcomes of a silence judgement (the silent_nodes_total label).
const (
	silenceSilent     = "silent"
	silenceLeaseAlive = "lease_alive"
)

type metrics struct {
	reg       prometheus.Registerer
	leader    prometheus.Gauge
	moves     *prometheus.CounterVec
	assigning prometheus.Gauge
	overdue   prometheus.Gauge
	failed    *prometheus.CounterVec
	// migrations counts migrate requests' steps by outcome.
	migrations *prometheus.CounterVec

	// Failure detection (detector.go, election.go).
	streams        prometheus.Gauge
	suspects       prometheus.Gauge
	deadNodes      prometheus.Counter
	detect         prometheus.Histogram
	decide         *prometheus.HistogramVec
	deadCandidates prometheus.Counter
	// silences counts silence judgements by outcome (silenceSilent,
	// silenceLeaseAlive); premature the verdicts the node's registration
	// outlived.
	silences  *prometheus.CounterVec
	premature prometheus.Counter

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
			Help: "Assignments written with a new owner or term, by reason (new, owner_lost, owner_dead, owner_silent, drain, request, open_timeout, migrate).",
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
	m.migrations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "migrations_total",
		Help: "Migrations by outcome: started (intent recorded in the chain), finished (the chain ends on the target; request deleted), refused (request deleted with a reason), cancelled (a stray intent removed).",
	}, []string{"outcome"})
	for _, o := range []string{"started", "finished", "refused", "cancelled"} {
		m.migrations.WithLabelValues(o)
	}
	buckets := prometheus.ExponentialBuckets(0.001, 2, 15) // 1 ms to 16 s
	m.streams = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "liveness_streams",
		Help: "Liveness streams the leader holds open to registered nodes, not counting those of nodes found silent (0 when not leading).",
	})
	m.suspects = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "suspect_nodes",
		Help: "Registered nodes the leader holds no liveness stream to and could not prove dead (0 when not leading).",
	})
	m.deadNodes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "dead_nodes_total",
		Help: "Node registrations whose process the leader confirmed gone (a connection to their address refused) before their lease expired.",
	})
	m.detect = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "detect_seconds", Buckets: buckets,
		Help: "From the first sign of a node's death (its liveness stream ended) to its confirmation (a connection refused).",
	})
	m.decide = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "decide_seconds", Buckets: buckets,
		Help: "From what a move rests on (for owner_dead the confirmed death, for owner_silent the verdict, else the start of the pass that decided it) to its write applied, by reason.",
	}, []string{"reason"})
	m.deadCandidates = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "dead_candidates_total",
		Help: "Election keys of candidates whose process was confirmed gone, deleted by the candidate waiting behind them.",
	})
	m.silences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "silent_nodes_total",
		Help: "Nodes found silent on their liveness stream for their lease's TTL and a heartbeat, by outcome: silent (taken as the lease's expiry: their channels move), lease_alive (etcd said the lease still had a second or more: they keep them).",
	}, []string{"outcome"})
	for _, o := range []string{silenceSilent, silenceLeaseAlive} {
		m.silences.WithLabelValues(o)
	}
	m.premature = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "streamwal", Subsystem: "coordinator", Name: "premature_silences_total",
		Help: "Silent verdicts whose node registration was still there its lease's TTL and a second after: the lease had not expired, the moves were needless (the node was alive, only not heard).",
	})
	for _, r := range reasons {
		m.moves.WithLabelValues(string(r))
		m.decide.WithLabelValues(string(r))
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
	for _, c := range []prometheus.Collector{m.leader, m.moves, m.assigning, m.overdue, m.failed, m.migrations,
		m.streams, m.suspects, m.deadNodes, m.detect, m.decide, m.deadCandidates, m.silences, m.premature} {
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
