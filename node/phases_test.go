package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// An open's Opened report carries its phases (seen, fenced, ready, in
// that order), which the phase histograms record once; the first append
// acknowledged at the term is timed once.
func TestOpenPhasesReportedAndTimed(t *testing.T) {
	c := newTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	mo, err := memory.New(ctx, memory.Config{Cluster: c.mem})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	n, err := node.New(c.cli, mo, node.Config{ID: "n1", Root: c.layout.Root, SessionTTL: 2 * time.Second, Backend: "memory",
		Registerer: reg, Gatherer: reg})
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, n.Shutdown(ctx))
		_ = mo.Close()
	})

	c.assign("ph", "n1", 1)
	o := mustOpened(c, "ph")
	require.False(t, o.Seen.IsZero(), "the report has no phases: %+v", o)
	require.False(t, o.Fenced.Before(o.Seen), "fenced %v before seen %v", o.Fenced, o.Seen)
	require.False(t, o.Ready.Before(o.Fenced), "ready %v before fenced %v", o.Ready, o.Fenced)
	require.EqualValues(t, 1, histogramCount(t, reg, "streamwal_node_open_phase_seconds", "fence"))
	require.EqualValues(t, 1, histogramCount(t, reg, "streamwal_node_open_phase_seconds", "tail"))
	require.Zero(t, histogramCount(t, reg, "streamwal_node_first_append_seconds", ""))

	api := apiClient(n)
	for _, p := range []string{"one", "two"} {
		_, err := api.Append(ctx, appendReq("ph", p, ""))
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, histogramCount(t, reg, "streamwal_node_first_append_seconds", ""), "not one first append per term")
}

// histogramCount is the sample count of the histogram name (of the series
// whose phase label is phase, when not empty).
func histogramCount(t *testing.T, g prometheus.Gatherer, name, phase string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := phase == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" && l.GetValue() == phase {
					match = true
				}
			}
			if match {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}
