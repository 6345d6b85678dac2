package adaptor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// Fast concurrent writers must not put more between two watermarks than a
// reader's reorder buffer holds: the watermark goroutine can be scheduled
// late among busy appenders, and appends are held back rather than letting
// the gap grow. Before, every catch-up scanner of such a log failed with
// ErrScannerBufferFull.
func TestFastWritersKeepTheLogReadable(t *testing.T) {
	const (
		records    = 20_000
		appenders  = 16
		watermarkB = 64 << 10
		budget     = 4 * watermarkB
	)
	o := memOpener(t, memory.NewCluster(), memory.Config{})
	w := openWAL(t, o, "fast", 1, Options{WatermarkBytes: watermarkB, TimeTickInterval: time.Hour})
	ctx := context.Background()
	payload := make([]byte, 1<<10)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Error
	for range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Inc(); i <= records; i = next.Inc() {
				m, err := message.New(payload, nil)
				if err == nil {
					_, err = w.Append(ctx, m)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, failed.Load())
	require.NoError(t, w.Sync(ctx))

	ro := openWAL(t, o, "fast", 0, Options{ReadOnly: true, ScannerBufferBytes: budget, WatermarkBytes: watermarkB, MaxMessageBytes: watermarkB})
	s, err := ro.Read(ctx, ReadOption{Name: "catch-up"})
	require.NoError(t, err)
	defer s.Close()
	timeout := time.After(60 * time.Second)
	var last uint64
	for n := 0; n < records; n++ {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended after %d of %d: %v", n, records, s.Error())
			tt, _ := m.TimeTick()
			require.Greater(t, tt, last)
			last = tt
		case <-timeout:
			require.FailNowf(t, "watchdog", "read %d of %d", n, records)
		}
	}
}

// The tail cache evicts by advancing a head and compacting now and
// then; indexes, find and read must stay consistent through it.
func TestTailCacheEvictsInOrder(t *testing.T) {
	// Fixed-width payloads: every message has the same size, so the budget
	// holds exactly ten.
	msg := func(seq int64) message.Immutable {
		m, err := message.New([]byte(fmt.Sprintf("%04d", seq)), nil)
		require.NoError(t, err)
		return message.NewImmutable(m, message.NewSeqID("test", seq))
	}
	size := msg(0).Size() + 64
	b := newTailCache(10 * size)
	for seq := range int64(1000) {
		require.LessOrEqual(t, b.push(msg(seq)), 10*size)
		first := max(0, seq-9)
		if first > 0 {
			_, evicted, _, _ := b.read(first-1, 1)
			require.True(t, evicted, "after %d", seq)
		}
		got, evicted, _, _ := b.read(first, 100)
		require.False(t, evicted)
		require.Len(t, got, int(seq-first+1))
		for i, m := range got {
			require.Equal(t, fmt.Sprintf("%04d", first+int64(i)), string(m.Payload()))
		}
		i, found := b.find(msg(first).ID())
		require.True(t, found)
		require.Equal(t, first, i)
		if first > 0 {
			_, found = b.find(msg(first - 1).ID())
			require.False(t, found, "an evicted message is found")
		}
	}
	// A waiting reader is woken by the next push.
	_, _, wait, _ := b.read(1000, 1)
	require.NotNil(t, wait)
	b.push(msg(1000))
	select {
	case <-wait:
	default:
		t.Fatal("push did not wake a waiting reader")
	}
	b.close()
	_, _, _, closed := b.read(1001, 1)
	require.True(t, closed)
}

// The window spans several of the buffer's blocks: reads, finds and
// evictions stay consistent across block boundaries.
func TestTailCacheSpansBlocks(t *testing.T) {
	msg := func(seq int64) message.Immutable {
		m, err := message.New([]byte(fmt.Sprintf("%05d", seq)), nil)
		require.NoError(t, err)
		return message.NewImmutable(m, message.NewSeqID("test", seq))
	}
	const window = 2*cacheBlock + 37
	size := msg(0).Size() + 64
	b := newTailCache(window * size)
	var seq int64
	for round := range 40 {
		batch := make([]message.Immutable, 1+round%70)
		for i := range batch {
			batch[i] = msg(seq)
			seq++
		}
		b.push(batch...)
		first := max(0, seq-window)
		require.Equal(t, first, b.base)
		got, evicted, _, _ := b.read(first, 4*cacheBlock)
		require.False(t, evicted)
		require.Len(t, got, int(seq-first))
		for i, m := range got {
			require.Equal(t, fmt.Sprintf("%05d", first+int64(i)), string(m.Payload()))
		}
		for _, s := range []int64{first, (first + seq) / 2, seq - 1} {
			i, found := b.find(msg(s).ID())
			require.True(t, found, "seq %d", s)
			require.Equal(t, s, i)
		}
	}
}
