package s3

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

func gather(t *testing.T, reg *prometheus.Registry) map[string][]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()
	}
	return out
}

func TestMetrics(t *testing.T) {
	st := newTestStore(t)
	reg := prometheus.NewRegistry()
	cfg := st.config(nil)
	ctx := context.Background()
	o, err := New(ctx, cfg, walimpls.WithRegisterer(reg))
	require.NoError(t, err)
	defer o.Close()
	// A second Opener on the same registry shares the series.
	o2, err := New(ctx, cfg, walimpls.WithRegisterer(reg))
	require.NoError(t, err)
	defer o2.Close()
	w := openWAL(t, o, "metered", 1, walimpls.ReadWrite)
	appendOK(t, w, "x")
	got := gather(t, reg)
	for _, name := range []string{"streamwal_s3_requests_total", "streamwal_s3_put_bytes_total", "streamwal_s3_flush_bytes",
		"streamwal_s3_flush_records", "streamwal_s3_flush_seconds", "streamwal_s3_conditional_writes_proven", "streamwal_s3_buffered_bytes"} {
		require.NotEmpty(t, got[name], name)
	}
	var probes float64
	for _, m := range got["streamwal_s3_requests_total"] {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["kind"] == reqProbe && labels["result"] == res412 {
			probes += m.GetCounter().GetValue()
		}
	}
	require.Equal(t, float64(2*(cfg.ProbeRacers-1)+2), probes, "each probe: racers-1 lost, a wrong ETag")
	require.Equal(t, 1.0, got["streamwal_s3_conditional_writes_proven"][0].GetGauge().GetValue())
	require.NoError(t, w.Close())
	require.Empty(t, gather(t, reg)["streamwal_s3_buffered_bytes"], "the channel's series go with its last WAL")
}
