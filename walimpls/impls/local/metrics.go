package local

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a store's Prometheus series, labelled with its root directory
// so that several stores can share a registry. They are unregistered when the
// store closes.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	appends       prometheus.Counter
	appendBytes   prometheus.Counter
	syncSeconds   prometheus.Histogram
	batchRecords  prometheus.Histogram
	droppedBytes  prometheus.Counter
	droppedFrames prometheus.Counter
	segments      prometheus.Gauge
	recycled      prometheus.Counter

	// The disk watermarks' series (doc.go, Disk space), registered only
	// when a watermark is on.
	diskFree         prometheus.Gauge
	diskPressure     prometheus.Gauge
	diskChecks       prometheus.Counter
	throttledAppends prometheus.Counter
	throttleSeconds  prometheus.Counter
	refusedAppends   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, dir string, disk bool) (*metrics, error) {
	labels := prometheus.Labels{"dir": dir}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "streamwal", Subsystem: "local", Name: name, Help: help, ConstLabels: labels}
	}
	m := &metrics{reg: reg}
	m.appends = prometheus.NewCounter(prometheus.CounterOpts(opts("appends_total", "Messages appended and acknowledged.")))
	m.appendBytes = prometheus.NewCounter(prometheus.CounterOpts(opts("append_bytes_total", "Frame bytes written for acknowledged messages.")))
	m.syncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "streamwal", Subsystem: "local", Name: "fdatasync_seconds",
		Help: "Duration of the journal's fdatasync calls.", ConstLabels: labels,
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m.batchRecords = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "streamwal", Subsystem: "local", Name: "flush_records",
		Help: "Records written per flush round (group commit size).", ConstLabels: labels,
		Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	})
	m.droppedBytes = prometheus.NewCounter(prometheus.CounterOpts(opts("recovery_dropped_bytes_total", "Bytes of a torn tail dropped by recovery.")))
	m.droppedFrames = prometheus.NewCounter(prometheus.CounterOpts(opts("recovery_dropped_frames_total", "Frames (torn or after a torn one) dropped by recovery.")))
	m.segments = prometheus.NewGauge(prometheus.GaugeOpts(opts("segments", "Live segment files.")))
	m.recycled = prometheus.NewCounter(prometheus.CounterOpts(opts("segments_recycled_total", "Truncated segments reused as the next segment instead of zero-filling a new one.")))
	m.collectors = []prometheus.Collector{m.appends, m.appendBytes, m.syncSeconds, m.batchRecords, m.droppedBytes, m.droppedFrames, m.segments, m.recycled}
	m.diskFree = prometheus.NewGauge(prometheus.GaugeOpts(opts("disk_free_bytes", "Free bytes of the root's file system, as last read.")))
	m.diskPressure = prometheus.NewGauge(prometheus.GaugeOpts(opts("disk_pressure", "0: free space at or above the soft watermark; 1: below it, appends throttled; 2: below the hard watermark, appends refused.")))
	m.diskChecks = prometheus.NewCounter(prometheus.CounterOpts(opts("disk_checks_total", "Readings of the root's free space (statfs).")))
	m.throttledAppends = prometheus.NewCounter(prometheus.CounterOpts(opts("disk_throttled_appends_total", "Appends that waited below the soft watermark.")))
	m.throttleSeconds = prometheus.NewCounter(prometheus.CounterOpts(opts("disk_throttle_seconds_total", "Time appends waited below the soft watermark.")))
	m.refusedAppends = prometheus.NewCounter(prometheus.CounterOpts(opts("disk_refused_appends_total", "Appends refused below the hard watermark (ErrDiskFull).")))
	if disk {
		m.collectors = append(m.collectors, m.diskFree, m.diskPressure, m.diskChecks, m.throttledAppends, m.throttleSeconds, m.refusedAppends)
	}
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, r := range m.collectors[:i] {
				reg.Unregister(r)
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
