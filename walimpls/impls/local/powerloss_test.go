package local

import (
	"bytes"
	"context"
	"maps"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// TestPowerLoss simulates power losses on the in-memory file system: at a
// random moment only synced bytes are sure to survive and unsynced sectors
// survive at random. With SyncAlways every acknowledged message must come
// back intact; with every policy, recovery must succeed (damage is always
// a torn tail, never "corruption") and never return a corrupt message.
func TestPowerLoss(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		t.Run(string(policy), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
			fs := newMemFS()
			cfg := Config{Dir: "/root", SegmentBytes: 64 << 10, MaxMessageBytes: 16 << 10, Sync: policy, SyncInterval: time.Millisecond}
			dropped, recycled := int64(0), 0
			var prevAcked map[string]uint64
			for round := 1; round <= 15; round++ {
				s, err := New(context.Background(), withFS(cfg, fs))
				require.NoError(t, err, "round %d: recovery", round)
				dropped += s.Recovery().DroppedBytes
				w, err := s.Open(context.Background(), walimpls.Channel{Name: "c", Term: int64(round)})
				require.NoError(t, err)
				if round > 1 {
					end := checkPowerLoss(t, w, prevAcked, policy == SyncAlways, round)
					// Keep the log small.
					require.NoError(t, w.Truncate(context.Background(), end))
				}

				acked := map[string]uint64{}
				var mu sync.Mutex
				var wg sync.WaitGroup
				stop := make(chan struct{})
				for g := 0; g < 4; g++ {
					wg.Add(1)
					r := rand.New(rand.NewPCG(rng.Uint64(), uint64(g)))
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							seed := r.Uint64()
							m, _ := message.New(powerPayload(seed), map[string]string{"seed": strconv.FormatUint(seed, 10)})
							id, err := w.Append(context.Background(), m)
							if err != nil {
								return // the store is closed under us after the crash
							}
							mu.Lock()
							acked[id.Marshal()] = seed
							mu.Unlock()
						}
					}()
				}
				time.Sleep(time.Duration(1+rng.IntN(20)) * time.Millisecond)
				mu.Lock()
				// The power goes: what is acknowledged from here on does
				// not count, and what the store writes goes to the old fs.
				crashed := fs.crash(rng)
				prevAcked = maps.Clone(acked)
				mu.Unlock()
				close(stop)
				wg.Wait()
				var rec dto.Metric
				_ = s.m.recycled.Write(&rec)
				recycled += int(rec.GetCounter().GetValue())
				require.NoError(t, s.Close())
				fs = crashed
			}
			t.Logf("%s: %d torn bytes dropped, %d segments recycled over the rounds", policy, dropped, recycled)
		})
	}
}

func powerPayload(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, r.IntN(12<<10))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkPowerLoss reads the channel back after a crash, checking every
// message and, when durable, that every acknowledged one survived. It
// returns the ID of the end marker it appended.
func checkPowerLoss(t *testing.T, w walimpls.WALImpl, acked map[string]uint64, durable bool, round int) message.ID {
	t.Helper()
	// Mark the end with a fresh append, then read everything up to it.
	end, err := w.Append(context.Background(), message.Message{})
	require.NoError(t, err)
	got := readUntil(t, w, end)
	seen := map[string]bool{}
	for _, m := range got[:len(got)-1] {
		seedStr, ok := m.Properties().Get("seed")
		if !ok {
			continue // the end markers of earlier rounds
		}
		seed, err := strconv.ParseUint(seedStr, 10, 64)
		require.NoError(t, err)
		require.Truef(t, bytes.Equal(powerPayload(seed), m.Payload()), "round %d: corrupt message %s", round, m.ID())
		seen[m.ID().Marshal()] = true
	}
	if durable {
		for id := range acked {
			require.Truef(t, seen[id], "round %d: acknowledged %s lost", round, id)
		}
	}
	return end
}

// TestTermsSurviveSegmentDeletion: without fsync, deleting the oldest
// segment must not leave the channel's term only in the last segment's
// unsynced start frame: after a power loss that kept the deletion and none
// of the unsynced bytes, a lower term is still refused. What holds it: only
// a truncation frees a segment, and a truncate frame is synced whatever
// the policy (with it the start frame before it); this test fails when
// that sync is dropped.
func TestTermsSurviveSegmentDeletion(t *testing.T) {
	ctx := context.Background()
	fs := newMemFS()
	cfg := Config{Dir: "/root", SegmentBytes: 64 << 10, MaxMessageBytes: 16 << 10, Sync: SyncNone}
	s, err := New(context.Background(), withFS(cfg, fs))
	require.NoError(t, err)
	w, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 5})
	require.NoError(t, err)
	segments := func() int {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segments)
	}
	var last message.ID
	for segments() < 2 {
		m, _ := message.New(bytes.Repeat([]byte("x"), 4<<10), nil)
		last, err = w.Append(ctx, m)
		require.NoError(t, err)
	}
	require.NoError(t, w.Truncate(ctx, last))
	// Wait until the store holds one segment and its file is the only one
	// left (it deletes the file after it forgot the segment).
	segmentFiles := func() int {
		names, err := fs.ReadDir("/root")
		require.NoError(t, err)
		n := 0
		for _, name := range names {
			if strings.HasPrefix(name, "wal-") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for segments() > 1 || segmentFiles() > 1 {
		require.True(t, time.Now().Before(deadline), "the truncated segment was never deleted")
		runtime.Gosched()
	}
	// The file system commits the deletion; then the power goes, and no
	// unsynced byte reaches the disk.
	require.NoError(t, fs.SyncDir("/root"))
	_, keepNone := crashExtremes()
	crashed := fs.crash(keepNone)
	require.NoError(t, s.Close())

	s2, err := New(context.Background(), withFS(cfg, crashed))
	require.NoError(t, err)
	defer s2.Close()
	_, err = s2.Open(ctx, walimpls.Channel{Name: "c", Term: 4})
	require.ErrorIs(t, err, walimpls.ErrFenced, "term 5 was forgotten")
}
