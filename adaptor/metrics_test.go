package adaptor

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// An idle channel exports no latency histogram: its series appear with the
// first append (and the error series with the first failure), and go when
// the WAL closes.
func TestLatencySeriesAppearWithUse(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	require.NoError(t, err)
	w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "lazy", 1, Options{Metrics: metrics, TimeTickInterval: time.Hour})
	series := func() int { return testutil.CollectAndCount(metrics.appendLatency) }
	require.Zero(t, series(), "an idle channel exports no latency buckets")
	m, _ := message.New([]byte("x"), nil)
	_, err = w.Append(context.Background(), m)
	require.NoError(t, err)
	require.Equal(t, 1, series(), "the ok series, once appended")
	require.NoError(t, w.Close())
	require.Zero(t, series(), "a closed channel's series are gone")
	_, err = w.Append(context.Background(), m)
	require.Error(t, err)
	require.Zero(t, series(), "an append refused after Close creates none")
}
