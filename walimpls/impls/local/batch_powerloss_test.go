package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/walimpls"
)

// A power loss at every step while concurrent writers append batches
// (before each write, sync, rename, ... of the store, keeping every
// unsynced byte, none, or a random mix of sectors), across segment
// switches: recovery keeps each batch whole or drops it whole - never a
// prefix - and with SyncAlways keeps every acknowledged batch.
func TestPowerLossDuringBatches(t *testing.T) {
	cutShort := 0
	for _, policy := range []SyncPolicy{SyncAlways, SyncNone} {
		t.Run(string(policy), func(t *testing.T) { cutShort += powerLossDuringBatches(t, policy) })
	}
	require.Positive(t, cutShort, "some power loss tore a batch")
}

// powerLossDuringBatches returns how many recoveries cut a batch short.
func powerLossDuringBatches(t *testing.T, policy SyncPolicy) int {
	fs := newMemFS()
	cfg := Config{Dir: "/root", SegmentBytes: 64 << 10, MaxMessageBytes: 8 << 10, Sync: policy}
	s, err := New(context.Background(), withFS(cfg, fs.hooked()))
	require.NoError(t, err)
	w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 1})
	require.NoError(t, err)

	type snapshot struct {
		fs    *memFS
		acked int
		step  string
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 5))
	all, none := crashExtremes()
	var (
		mu    sync.Mutex
		acked []string // tags of acknowledged batches
		snaps []snapshot
	)
	hook := func(op, name string) {
		mu.Lock()
		defer mu.Unlock()
		// Several random mixes of sectors where something is unsynced
		// (the others are the same as keeping all or none).
		var taken []*memFS
	next:
		for _, r := range []*rand.Rand{all, none, rng, rng, rng, rng} {
			c := fs.crash(r)
			for _, o := range taken {
				if c.sameAs(o) {
					continue next
				}
			}
			taken = append(taken, c)
			snaps = append(snaps, snapshot{fs: c, acked: len(acked), step: op + " " + filepath.Base(name)})
		}
	}
	fs.before.Store(&hook)
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		r := rand.New(rand.NewPCG(seed, uint64(g)))
		go func() {
			defer wg.Done()
			for k := range 16 {
				tag := fmt.Sprintf("%d-%d", g, k)
				// Mostly small messages, so that a torn write often keeps
				// a batch's first frames; large ones for segment switches.
				size := 50 + r.IntN(350)
				if k%2 == 1 {
					size = 2500 + r.IntN(1000)
				}
				if _, err := w.AppendBatch(context.Background(), batchMessages(tag, 2+r.IntN(6), size)); err != nil {
					t.Errorf("batch %s: %v", tag, err)
					return
				}
				mu.Lock()
				acked = append(acked, tag)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// With SyncNone the batches were acknowledged before they were
	// written: Close writes and syncs them, under the hook too.
	require.NoError(t, s.Close())
	fs.before.Store(nil)
	require.GreaterOrEqual(t, countSegments(fs), 3, "the batches crossed segment switches")

	cutShort, partial := 0, 0
	for i, sn := range snaps {
		what := fmt.Sprintf("power loss %d, before %s", i, sn.step)
		s, err := New(context.Background(), withFS(cfg, sn.fs))
		require.NoError(t, err, what)
		if strings.HasPrefix(s.Recovery().Reason, "batch cut short") {
			cutShort++
		}
		w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 2})
		require.NoError(t, err, what)
		end, err := walimpls.Append(context.Background(), w, msg(t, "end"))
		require.NoError(t, err, what)
		got := readUntil(t, w, end)
		present := checkBatches(t, got[:len(got)-1], what)
		checkBatchPayloads(t, got, what)
		if policy == SyncAlways {
			for _, tag := range acked[:sn.acked] {
				require.Truef(t, present[tag], "%s: acknowledged batch %s lost", what, tag)
			}
		}
		if len(present) < len(acked) && len(present) > sn.acked {
			partial++ // some batches of the interrupted rounds survived, some not
		}
		require.NoError(t, s.Close(), what)

		// What recovery left opens again, without anything to repair.
		s, err = New(context.Background(), withFS(cfg, sn.fs))
		require.NoError(t, err, what)
		require.Zero(t, s.Recovery().DroppedBytes, what)
		w, err = s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 2, Mode: walimpls.ReadOnly})
		require.NoError(t, err, what)
		last, err := w.Last(context.Background())
		require.NoError(t, err, what)
		require.True(t, last.EQ(end), what)
		require.NoError(t, s.Close(), what)
	}
	t.Logf("%d power losses checked; %d cut a batch short, %d kept some unacknowledged batches", len(snaps), cutShort, partial)
	return cutShort
}
