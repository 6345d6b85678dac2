package local

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
)

// A scanner that stops reading while far more than every buffer budget is
// appended must not make the process hold the backlog in memory: the data
// stays on disk, the tail cache evicts, the stalled scanner is
// back-pressured. When it reads again it delivers everything, in order.
func TestAdaptorMemoryStaysBounded(t *testing.T) {
	total := 256 << 20
	if testing.Short() {
		total = 32 << 20
	}
	const (
		record = 64 << 10
		budget = 8 << 20
		// allowance covers what is not a buffer: the backend's batch and
		// read-ahead, the appender's record, the runtime's own slack (a
		// loaded machine once measured 16.4 MiB above the budgets). A
		// backlog held in memory would be the 256 MiB appended.
		allowance = 24 << 20
	)
	s, err := New(context.Background(), Config{Dir: t.TempDir(), SegmentBytes: 32 << 20, Sync: SyncNone})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	ctx := context.Background()
	w, err := adaptor.Open(ctx, s, adaptor.Channel{Name: "bounded", Term: 1}, adaptor.Options{
		TimeTickInterval:   10 * time.Millisecond,
		WatermarkBytes:     budget / 4,
		TailCacheBytes:     budget,
		ScannerBufferBytes: budget,
		// A scanner must hold one message of MaxMessageBytes besides two
		// watermarks' worth of appends (adaptor.Options.Validate).
		MaxMessageBytes: budget / 2,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })

	sc, err := w.Read(ctx, adaptor.ReadOption{Name: "stalled"})
	require.NoError(t, err)
	defer func() { _ = sc.Close() }()

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	var peak uint64
	payload := make([]byte, record)
	n := total / record
	for i := range n {
		binary.BigEndian.PutUint64(payload, uint64(i))
		m, err := message.New(payload, nil)
		require.NoError(t, err)
		_, err = w.Append(ctx, m)
		require.NoError(t, err)
		if i%64 == 63 {
			peak = max(peak, heap())
		}
	}
	require.NoError(t, w.Sync(ctx))
	// Gives the stalled scanner's read-ahead time to fill before the last
	// measure. Too short a pause can only lower the peak (a false pass),
	// never fail the test.
	time.Sleep(50 * time.Millisecond)
	peak = max(peak, heap())
	growth := int64(peak) - int64(base)
	t.Logf("appended %d MiB with a stalled scanner: heap grew by %.1f MiB (budgets %d MiB + allowance %d MiB)",
		total>>20, float64(growth)/(1<<20), 2*budget>>20, allowance>>20)
	require.LessOrEqual(t, growth, int64(2*budget+allowance), "heap growth above the buffer budgets")

	timer := time.NewTimer(2 * time.Minute)
	defer timer.Stop()
	for i := range n {
		select {
		case m, ok := <-sc.Chan():
			require.Truef(t, ok, "scanner ended at %d: %v", i, sc.Error())
			require.Len(t, m.Payload(), record)
			require.EqualValues(t, i, binary.BigEndian.Uint64(m.Payload()), "delivered out of order")
		case <-timer.C:
			require.FailNowf(t, "watchdog", "delivered %d of %d", i, n)
		}
	}
}
