package s3

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Request kinds and results of streamwal_s3_requests_total.
const (
	reqPut    = "put"
	reqGet    = "get"
	reqHead   = "head"
	reqList   = "list"
	reqDelete = "delete"
	reqProbe  = "probe"

	resOK    = "ok"
	res412   = "412"
	res404   = "404"
	resError = "error"
)

// metrics are the backend's series: streamwal_s3_*. Every Opener on one
// registry shares them; the per-channel ones are removed when the
// channel's last WAL of the Opener closes.
type metrics struct {
	requests     *prometheus.CounterVec
	putBytes     prometheus.Counter
	getBytes     prometheus.Counter
	flushBytes   prometheus.Histogram
	flushRecords prometheus.Histogram
	flushSeconds prometheus.Histogram
	// preconditions counts the 412s of data PUTs by what they meant:
	// "fenced" (another writer's fence or object), "own_retry" (the
	// flush's own earlier try had landed).
	preconditions *prometheus.CounterVec
	probe         prometheus.Gauge
	buffered      *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "streamwal", "s3"
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Requests to the store (each with the client's retries inside) by kind (put, get, head, list, delete, probe) and result (ok, 412, 404, error)."},
			[]string{"kind", "result"}),
		putBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "put_bytes_total",
			Help: "Bytes of objects written."}),
		getBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "get_bytes_total",
			Help: "Bytes of objects read."}),
		flushBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "flush_bytes",
			Help: "Bytes of one flush (one object).", Buckets: prometheus.ExponentialBuckets(256, 4, 10)}),
		flushRecords: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "flush_records",
			Help: "Messages in one flush (one object).", Buckets: prometheus.ExponentialBuckets(1, 4, 9)}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "flush_seconds",
			Help: "From a flush's PUT to its acknowledgement.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		preconditions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "flush_precondition_failed_total",
			Help: "412s of data PUTs by what they meant: fenced (another's fence or object), own_retry (the flush's own earlier try)."},
			[]string{"cause"}),
		probe: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "conditional_writes_proven",
			Help: "1 when the store proved at open that it honours conditional writes atomically, 0 when it failed, -1 when not checked (unfenced)."}),
		buffered: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "buffered_bytes",
			Help: "Bytes of appends queued or in flight, per channel."}, []string{"channel"}),
	}
	if reg == nil {
		return m, nil
	}
	register := func(c prometheus.Collector) (prometheus.Collector, error) {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return are.ExistingCollector, nil
			}
			return nil, err
		}
		return c, nil
	}
	var err error
	reuse := func(dst any, c prometheus.Collector) {
		if err != nil {
			return
		}
		var got prometheus.Collector
		got, err = register(c)
		if err != nil {
			return
		}
		switch d := dst.(type) {
		case **prometheus.CounterVec:
			*d = got.(*prometheus.CounterVec)
		case *prometheus.Counter:
			*d = got.(prometheus.Counter)
		case *prometheus.Histogram:
			*d = got.(prometheus.Histogram)
		case *prometheus.Gauge:
			*d = got.(prometheus.Gauge)
		case **prometheus.GaugeVec:
			*d = got.(*prometheus.GaugeVec)
		}
	}
	reuse(&m.requests, m.requests)
	reuse(&m.putBytes, m.putBytes)
	reuse(&m.getBytes, m.getBytes)
	reuse(&m.flushBytes, m.flushBytes)
	reuse(&m.flushRecords, m.flushRecords)
	reuse(&m.flushSeconds, m.flushSeconds)
	reuse(&m.preconditions, m.preconditions)
	reuse(&m.probe, m.probe)
	reuse(&m.buffered, m.buffered)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) request(kind, result string) { m.requests.WithLabelValues(kind, result).Inc() }

func (m *metrics) flushed(bytes, records int, start time.Time) {
	m.flushBytes.Observe(float64(bytes))
	m.flushRecords.Observe(float64(records))
	m.flushSeconds.Observe(time.Since(start).Seconds())
}
