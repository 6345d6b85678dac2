package local

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/testseed"
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
			rng := rand.New(rand.NewPCG(testseed.Seed(t), 7))
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
							id, err := walimpls.Append(context.Background(), w, m)
							if err != nil {
								return // the store is closed under us after the crash
							}
							mu.Lock()
							acked[id.Marshal()] = seed
							mu.Unlock()
						}
					}()
				}
				// A random moment for the power loss, not a wait for anything:
				// the checks hold whatever the appenders got done by then.
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
	end, err := walimpls.Append(context.Background(), w, message.Message{})
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
		last, err = walimpls.Append(ctx, w, m)
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

// A power loss at every step around the collection of segment N right
// after the switch to N+1, with the policies that do not sync appends: the
// collector may free N (delete it, or recycle it as a spare) as soon as
// N+1 is published, and a file system may make that unsynced unlink or
// rename durable before N+1's unsynced bytes. Were N+1's start frame not
// durable by then, N would be gone and N+1 would have no start frame: a
// root that cannot be opened (ErrCorrupt: its marker proves a start frame
// was durable), or without the marker an empty one, every term forgotten.
// Every power loss must open and keep the channels' terms, the deletion,
// and every record synced.
//
// What frees N before N+1 is published is a deletion framed in N: a
// truncation cannot, since a channel keeps its last message and a
// Truncate names a message it has, so the truncation that frees N is
// framed after the switch, in N+1, and synced with N+1's start frame. So
// channel e fills segment 1 and is deleted there; c and d hold no message
// in it, and once segment 1 is gone their terms live in segment 2's start
// frame only. The collection the deletion asks for may run late (the
// preparer also prepares spares and installs segments): the test asks for
// one once segment 2 is published.
func TestPowerLossAroundFreeingTheSegmentBeforeANewOne(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNone, SyncInterval} {
		// Segment 1 is recycled when its size is the one the store
		// prepares spares of, deleted when it is not.
		for _, c := range []struct {
			how          string
			segmentBytes int64
		}{{"recycled", 64 << 10}, {"deleted", 128 << 10}} {
			t.Run(string(policy)+"/"+c.how, func(t *testing.T) {
				powerLossAroundFreeing(t, policy, c.segmentBytes)
			})
		}
	}
}

func powerLossAroundFreeing(t *testing.T, policy SyncPolicy, segmentBytes int64) {
	ctx := context.Background()
	fs := newMemFS()
	// No sync but those the journal always makes: the interval never ends.
	cfg := Config{Dir: "/root", SegmentBytes: 64 << 10, MaxMessageBytes: 16 << 10, Sync: policy, SyncInterval: time.Hour}
	raw := func(n int, b byte) message.Message {
		m, err := message.New(bytes.Repeat([]byte{b}, n), nil)
		require.NoError(t, err)
		return m
	}
	const bigBytes = 8000
	deleteFrame := int64(frameSize(16))
	s, err := New(ctx, withFS(cfg, fs))
	require.NoError(t, err)
	openWAL(t, s, "c", 5)
	openWAL(t, s, "d", 7)
	e := openWAL(t, s, "e", 3)
	// Fill segment 1 until a delete frame still fits and a big message no
	// longer does after it.
	for {
		seg, r := segmentRoom(s)
		require.Equal(t, uint64(1), seg)
		if r < int64(frameSize(bigBytes))+deleteFrame {
			require.GreaterOrEqual(t, r, deleteFrame)
			break
		}
		_, err = walimpls.Append(ctx, e, raw(1000, 'e'))
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())

	cfg.SegmentBytes = segmentBytes
	s, err = New(ctx, withFS(cfg, fs.hooked()))
	require.NoError(t, err)
	defer s.Close()
	// Segment 1 holds e's messages only: the deletion frees it, but it is
	// the last segment.
	require.NoError(t, s.Delete(ctx, "e"))
	w := openWAL(t, s, "c", 5)

	type snapshot struct {
		fs        *memFS
		bigSynced bool
		step      string
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	all, none := crashExtremes()
	var (
		mu        sync.Mutex
		bigSynced bool
		snaps     []snapshot
	)
	seg2 := s.path(segmentName(2))
	hook := func(op, name string) {
		mu.Lock()
		defer mu.Unlock()
		// Namespace and bytes, each kept whole or not at all, and a mix.
		for _, r := range [][2]*rand.Rand{{all, all}, {none, none}, {all, none}, {none, all}, {rng, rng}} {
			snaps = append(snaps, snapshot{fs: fs.crashMix(r[0], r[1]), bigSynced: bigSynced, step: op + " " + filepath.Base(name)})
		}
	}
	synced := func(op, name string) {
		mu.Lock()
		defer mu.Unlock()
		if op == "sync" && name == seg2 {
			// Every write to segment 2 holds the big message. Set once the
			// sync returned: the crashes taken meanwhile (the preparer's
			// and the collector's operations run concurrently) may lose it.
			bigSynced = true
		}
	}
	fs.before.Store(&hook)
	fs.after.Store(&synced)
	// The big message starts segment 2.
	big, err := walimpls.Append(ctx, w, raw(bigBytes, 'b'))
	require.NoError(t, err)
	_, err = w.Last(ctx) // published, and segment 2 with it
	require.NoError(t, err)
	seg, _ := segmentRoom(s)
	require.Equal(t, uint64(2), seg, "the big message starts segment 2")
	s.prep.requestGC()
	seg1 := s.path(segmentName(1))
	fs.await(t, "segment 1 is freed", func(names map[string]int64) bool { _, ok := names[seg1]; return !ok })
	hook("end", "")
	fs.before.Store(nil)
	fs.after.Store(nil)
	require.NoError(t, s.Close())

	freed := 0
	for i, sn := range snaps {
		what := fmt.Sprintf("power loss %d, before %s", i, sn.step)
		if names, _ := sn.fs.ReadDir("/root"); !slices.Contains(names, filepath.Base(seg1)) {
			freed++
		}
		s, err := New(ctx, withFS(cfg, sn.fs))
		require.NoError(t, err, what)
		for _, ch := range []walimpls.Channel{{Name: "c", Term: 4}, {Name: "d", Term: 6}} {
			_, err = s.Open(ctx, ch)
			require.ErrorIs(t, err, walimpls.ErrFenced, "%s: the term of %s was forgotten", what, ch.Name)
		}
		// Deleted: the name is free, at any term, with nothing in it.
		last, err := openWAL(t, s, "e", 1).Last(ctx)
		require.NoError(t, err, what)
		require.True(t, last.IsZero(), "%s: e came back", what)
		w, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 5})
		require.NoError(t, err, what)
		end, err := walimpls.Append(ctx, w, msg(t, "end"))
		require.NoError(t, err, what)
		got := readUntil(t, w, end)
		sawBig := false
		for _, m := range got[:len(got)-1] {
			require.True(t, m.ID().EQ(big), "%s: message %s, the only one kept is %s", what, m.ID(), big)
			require.Equal(t, raw(bigBytes, 'b').Payload(), m.Payload(), what)
			sawBig = true
		}
		if sn.bigSynced {
			require.True(t, sawBig, "%s: the synced message %s was lost", what, big)
		}
		require.NoError(t, s.Close(), what)
	}
	t.Logf("%d power losses checked, %d after segment 1's removal reached the disk", len(snaps), freed)
	require.Positive(t, freed)
}

// A truncation that frees several segments at once frees them oldest
// first, each gone for good before the next goes: on a file system that
// makes unsynced directory changes durable in any order, a power loss at
// any step leaves the oldest segments present contiguous, and the store
// opens with every message the truncation kept.
func TestPowerLossWhileFreeingSeveralSegments(t *testing.T) {
	ctx := context.Background()
	fs := newMemFS()
	// Freed segments are recycled (renamed to spares, two at most) or
	// deleted: either is a namespace change that may or may not survive.
	cfg := Config{Dir: "/root", SegmentBytes: 128 << 10, MaxMessageBytes: 16 << 10}
	s, err := New(ctx, withFS(cfg, fs.hooked()))
	require.NoError(t, err)
	defer s.Close()
	w := openWAL(t, s, "c", 1)
	var ids []message.ID
	for {
		seg, _ := segmentRoom(s)
		if seg == 5 {
			break
		}
		ids = append(ids, appendBig(t, w, len(ids)))
	}
	keep := ids[len(ids)-1] // the first message of segment 5
	got, err := readAvailable(t, w, cursor.StartFrom(keep))
	require.NoError(t, err)
	require.Len(t, got, 1)

	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 13))
	var (
		mu    sync.Mutex
		snaps []*memFS
		steps []string
	)
	hook := func(op, name string) {
		mu.Lock()
		defer mu.Unlock()
		for range 4 {
			snaps = append(snaps, fs.crashUnordered(rng, rng))
			steps = append(steps, op+" "+filepath.Base(name))
		}
	}
	fs.before.Store(&hook)
	passes := s.prep.collections.Load()
	require.NoError(t, w.Truncate(ctx, keep))
	s.prep.requestGC()
	fs.await(t, "segments 1 to 4 are freed", func(names map[string]int64) bool {
		for n := uint64(1); n <= 4; n++ {
			if _, ok := names[s.path(segmentName(n))]; ok {
				return false
			}
		}
		return true
	})
	// The pass syncs the directory once more after the last removal: wait
	// for it to end, so that no hook runs while snaps is read below.
	require.Eventually(t, func() bool { return s.prep.collections.Load() > passes }, 10*time.Second, time.Millisecond,
		"the collection pass ends")
	hook("end", "")
	fs.before.Store(nil)
	fs.after.Store(nil)

	for i, sn := range snaps {
		what := fmt.Sprintf("power loss %d, before %s (seed %d)", i, steps[i], seed)
		s2, err := New(ctx, withFS(cfg, sn))
		require.NoError(t, err, what)
		w2, err := s2.Open(ctx, walimpls.Channel{Name: "c", Term: 1})
		require.NoError(t, err, what)
		got := readUntil(t, w2, keep)
		require.True(t, got[0].ID().LTE(keep), what)
		require.NoError(t, s2.Close(), what)
	}
}
