package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// TestMetricsReachTheRegisterer: the builder passes BuildParams.Registerer
// on, and appends and fences are counted there.
func TestMetricsReachTheRegisterer(t *testing.T) {
	c := newCluster(t)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := testConfig(c)
	o, err := NewBuilder().Build(ctx, walimpls.BuildParams{
		Config:     walimplstest.Decodes(cfg),
		Registerer: reg,
	})
	require.NoError(t, err)
	defer o.Close()
	w1 := open(t, o, "metrics", 1, walimpls.ReadWrite)
	_, err = walimpls.Append(ctx, w1, msg(t, "a", nil))
	require.NoError(t, err)
	_, err = w1.AppendBatch(ctx, []message.Message{msg(t, "b", nil), msg(t, "c", nil)})
	require.NoError(t, err)
	m := o.(*Opener).m
	require.EqualValues(t, 3, testutil.ToFloat64(m.appends))
	require.Positive(t, testutil.ToFloat64(m.appendBytes))

	open(t, o, "metrics", 2, walimpls.ReadWrite)
	_, err = walimpls.Append(ctx, w1, msg(t, "stale", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.EqualValues(t, 1, testutil.ToFloat64(m.fenced))

	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	require.True(t, names["streamwal_kafka_appends_total"], "registered: %v", names)
	require.True(t, names["streamwal_kafka_fenced_total"], "registered: %v", names)
}
