package adaptor

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// schedule reports the watermarker's schedule: a timer armed, a write
// running.
func (k *watermarker) schedule() (armed, running bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.timer != nil, k.running
}

// waitIdle waits until no write is scheduled or running.
func waitIdle(t *testing.T, k *watermarker) {
	t.Helper()
	require.Eventually(t, func() bool {
		armed, running := k.schedule()
		return !armed && !running
	}, 10*time.Second, time.Millisecond)
}

// Periodic watermarks follow the WAL's clock: none is scheduled while the
// channel is idle, an append arms one for TimeTickInterval later, and
// advancing the clock writes it; then the schedule is idle again.
func TestWatermarksFollowTheClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clock := clockwork.NewFakeClock()
	w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "clock", 1,
		Options{Clock: clock, TimeTickInterval: time.Minute})
	k := w.marks
	armed, running := k.schedule()
	require.False(t, armed || running, "an idle WAL schedules nothing")
	first := k.lastWritten()

	m, _ := message.New([]byte("x"), nil)
	_, err := w.Append(ctx, m)
	require.NoError(t, err)
	armed, _ = k.schedule()
	require.True(t, armed, "an append arms the periodic watermark")
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	require.Equal(t, first, k.lastWritten(), "nothing is written before the interval")

	clock.Advance(time.Minute - time.Nanosecond)
	require.Equal(t, first, k.lastWritten(), "nothing is written before the interval")
	clock.Advance(time.Nanosecond)
	require.Eventually(t, func() bool { return k.lastWritten() != first }, 10*time.Second, time.Millisecond,
		"the interval passed: a watermark is written")
	waitIdle(t, k)

	// Idle again: advancing the clock writes nothing more.
	second := k.lastWritten()
	clock.Advance(time.Hour)
	waitIdle(t, k)
	require.Equal(t, second, k.lastWritten())
}

// WatermarkBytes appended kick a watermark at once, whatever the clock.
func TestWatermarkBytesKickAWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clock := clockwork.NewFakeClock()
	w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "kick", 1,
		Options{Clock: clock, TimeTickInterval: time.Hour, WatermarkBytes: 4 << 10})
	first := w.marks.lastWritten()
	m, _ := message.New(make([]byte, 5<<10), nil)
	_, err := w.Append(ctx, m)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.marks.lastWritten() != first }, 10*time.Second, time.Millisecond)
	waitIdle(t, w.marks)
}
