package kafka

import (
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the backend's series, for every channel of one Opener
// together: streamwal_kafka_*.
type metrics struct {
	appends       prometheus.Counter
	appendBytes   prometheus.Counter
	appendErrors  prometheus.Counter
	appendSeconds prometheus.Histogram
	fenced        prometheus.Counter
	commitRepairs prometheus.Counter
}

// newMetrics registers the series on reg; nil registers none (the series
// still count, unseen).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "streamwal", Subsystem: "kafka", Name: name, Help: help}
	}
	m := &metrics{
		appends:      prometheus.NewCounter(opts("appends_total", "Messages appended and acknowledged.")),
		appendBytes:  prometheus.NewCounter(opts("append_bytes_total", "Message bytes appended and acknowledged.")),
		appendErrors: prometheus.NewCounter(opts("append_errors_total", "Batches whose append failed.")),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "streamwal", Subsystem: "kafka", Name: "append_seconds",
			Help: "Latency of a batch append (one transaction with transactions).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		fenced: prometheus.NewCounter(opts("fenced_total", "WALs fenced by a later claim.")),
		commitRepairs: prometheus.NewCounter(opts("commit_repairs_total",
			"Commits the Kafka client skipped, sent by the backend itself (see the package documentation).")),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.appends, m.appendBytes, m.appendErrors, m.appendSeconds, m.fenced, m.commitRepairs} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Wrap(err, "kafka: register metrics")
		}
	}
	return m, nil
}

// observeAppend counts a batch append that started at start.
func (m *metrics) observeAppend(start time.Time, sizes []int, stored int, err error) {
	m.appendSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		m.appendErrors.Inc()
	}
	m.appends.Add(float64(stored))
	for _, s := range sizes[:min(stored, len(sizes))] {
		m.appendBytes.Add(float64(s))
	}
}
