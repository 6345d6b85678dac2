package local

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// batchMessages makes the n messages of batch tag, each with a payload of
// about size bytes that batchPayload rebuilds from its properties.
func batchMessages(tag string, n, size int) []message.Message {
	msgs := make([]message.Message, n)
	for i := range msgs {
		msgs[i], _ = message.New(batchPayload(tag, i, size), map[string]string{
			"batch": tag, "i": strconv.Itoa(i), "n": strconv.Itoa(n), "size": strconv.Itoa(size),
		})
	}
	return msgs
}

func batchPayload(tag string, i, size int) []byte {
	return []byte(fmt.Sprintf("%s/%d/", tag, i) + strings.Repeat(string(rune('a'+i%26)), size))
}

// checkBatches checks messages read back in ID order: every batch present
// is whole, in slice order, with consecutive IDs. Messages without a batch
// property are skipped. It returns the tags of the batches present.
func checkBatches(t *testing.T, got []message.Immutable, what string) map[string]bool {
	t.Helper()
	present := map[string]bool{}
	for i := 0; i < len(got); {
		tag, ok := got[i].Properties().Get("batch")
		if !ok {
			i++
			continue
		}
		require.Falsef(t, present[tag], "%s: batch %s twice", what, tag)
		nStr, _ := got[i].Properties().Get("n")
		n, err := strconv.Atoi(nStr)
		require.NoError(t, err, what)
		first, err := message.SeqOf(Name, got[i].ID())
		require.NoError(t, err, what)
		for k := range n {
			require.Lessf(t, i+k, len(got), "%s: batch %s ends after %d of its %d messages", what, tag, k, n)
			m := got[i+k]
			mTag, _ := m.Properties().Get("batch")
			idx, _ := m.Properties().Get("i")
			require.Truef(t, mTag == tag && idx == strconv.Itoa(k), "%s: batch %s: message %d is %s (batch %q, index %q): a batch cut short or out of order", what, tag, k, m.ID(), mTag, idx)
			seq, err := message.SeqOf(Name, m.ID())
			require.NoError(t, err, what)
			require.Equalf(t, first+int64(k), seq, "%s: batch %s: IDs are not consecutive", what, tag)
		}
		present[tag] = true
		i += n
	}
	return present
}

// checkBatchPayloads checks that the messages of batchMessages are intact.
func checkBatchPayloads(t *testing.T, got []message.Immutable, what string) {
	t.Helper()
	for _, m := range got {
		tag, ok := m.Properties().Get("batch")
		if !ok {
			continue
		}
		i, _ := m.Properties().Get("i")
		size, _ := m.Properties().Get("size")
		idx, err1 := strconv.Atoi(i)
		sz, err2 := strconv.Atoi(size)
		require.NoError(t, errors.CombineErrors(err1, err2), what)
		require.Equalf(t, string(batchPayload(tag, idx, sz)), string(m.Payload()), "%s: message %s is damaged", what, m.ID())
	}
}

// diskBatches decodes every message frame of the store's segment files
// (closed) and checks the on-disk form of batches: every frame of a batch
// but the last carries flagMore, the last none (so an Append's frame is the
// previous format's), and no batch spans two segments. It returns the
// number of batches seen.
func diskBatches(t *testing.T, dir string) int {
	t.Helper()
	segOf := map[string]uint64{}
	for _, p := range segPaths(t, dir) {
		num, ok := parseSegmentName(filepath.Base(p))
		require.True(t, ok)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, f := range segmentFrames(t, p, num) {
			h, body, _, st := decodeFrame(b[f.off:], uint32(num))
			require.Equal(t, frameOK, st)
			if h.typ != typeMessage {
				require.Zero(t, h.flags, "segment %d offset %d: a %d frame with flags", num, f.off, h.typ)
				continue
			}
			m, err := decodeMessage(h.typ, body, true)
			require.NoError(t, err)
			tag, ok := m.Properties().Get("batch")
			if !ok {
				continue
			}
			i, _ := m.Properties().Get("i")
			n, _ := m.Properties().Get("n")
			more := i != strconv.Itoa(mustAtoi(t, n)-1)
			require.Equalf(t, more, h.flags == flagMore, "segment %d offset %d: message %s of batch %s of %s: flags %d", num, f.off, i, tag, n, h.flags)
			if seg, ok := segOf[tag]; ok {
				require.Equalf(t, seg, num, "batch %s spans segments %d and %d", tag, seg, num)
			}
			segOf[tag] = num
		}
	}
	return len(segOf)
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// Batches of concurrent writers on several channels, mixed with single
// appends, crossing segment switches and rounds of MaxBatchBytes: each is
// stored in slice order with consecutive IDs, read back whole before and
// after a reopen, and framed on disk as one run in one segment.
func TestAppendBatchConcurrent(t *testing.T) {
	cfg := smallSegments(t.TempDir())
	cfg.MaxBatchBytes = 16 << 10 // many batches are rounds of their own
	s, err := New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := context.Background()
	chans := []string{"a", "b", "c"}
	var (
		mu    sync.Mutex
		acked = map[string]int{} // channel -> messages acknowledged
		wg    sync.WaitGroup
		errs  = make(chan error, 2*len(chans))
	)
	for ci, name := range chans {
		w := openWAL(t, s, name, 1)
		wg.Add(2)
		go func() { // batches of 1 to 12 messages
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(ci), 1))
			for k := range 25 {
				n := 1 + r.IntN(12)
				ids, err := w.AppendBatch(ctx, batchMessages(fmt.Sprintf("%s-%d", name, k), n, r.IntN(3000)))
				if err == nil && len(ids) != n {
					err = fmt.Errorf("%d IDs for %d messages", len(ids), n)
				}
				for i := 1; err == nil && i < len(ids); i++ {
					a, _ := message.SeqOf(Name, ids[i-1])
					b, _ := message.SeqOf(Name, ids[i])
					if b != a+1 {
						err = fmt.Errorf("batch %d: ID %s after %s", k, ids[i], ids[i-1])
					}
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked[name] += n
				mu.Unlock()
			}
		}()
		go func() { // single appends in between
			defer wg.Done()
			for i := range 50 {
				if _, err := walimpls.Append(ctx, w, msg(t, fmt.Sprintf("single-%d", i))); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked[name]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	check := func(o walimpls.Opener) {
		t.Helper()
		for _, name := range chans {
			got := readN(t, openWAL(t, o, name, 2), walimpls.DeliverAll(), acked[name])
			require.Len(t, checkBatches(t, got, name), 25, name)
			checkBatchPayloads(t, got, name)
		}
	}
	check(s)
	require.NoError(t, s.Close())
	require.GreaterOrEqual(t, len(segPaths(t, cfg.Dir)), 4, "the batches crossed segment switches")
	require.Equal(t, 25*len(chans), diskBatches(t, cfg.Dir))
	s = openStore(t, cfg)
	require.Zero(t, s.Recovery().DroppedBytes)
	check(s)
}

// A batch that does not fit in the rest of the segment starts the next one;
// a batch that fits in no segment is ErrTooLarge naming the room of a
// segment, stores nothing and starts no segment.
func TestAppendBatchSegmentLimit(t *testing.T) {
	ctx := context.Background()
	cfg := smallSegments(t.TempDir()) // 64 KiB segments, 8 KiB messages
	s := openStore(t, cfg)
	w := openWAL(t, s, "c", 1).(*wal)
	segOf := func(id message.ID) uint64 {
		t.Helper()
		seq, err := seqOf(id)
		require.NoError(t, err)
		w.ch.mu.RLock()
		defer w.ch.mu.RUnlock()
		for _, e := range w.ch.entries {
			if e.seq == seq {
				return e.seg
			}
		}
		require.FailNow(t, "no entry", "seq %d", seq)
		return 0
	}
	batch := func(tag string, n int) ([]message.ID, error) {
		return w.AppendBatch(ctx, batchMessages(tag, n, 7500))
	}
	a, err := batch("a", 7) // about 53 KiB: most of segment 1
	require.NoError(t, err)
	b, err := batch("b", 7) // does not fit after a
	require.NoError(t, err)
	require.Equal(t, uint64(1), segOf(a[0]))
	require.Equal(t, segOf(a[0]), segOf(a[6]))
	require.Equal(t, uint64(2), segOf(b[0]), "b starts the next segment")
	require.Equal(t, segOf(b[0]), segOf(b[6]))

	s.j.mu.Lock()
	fseg := s.j.fseg
	s.j.mu.Unlock()
	_, err = batch("huge", 9) // about 68 KiB: more than a segment
	require.ErrorIs(t, err, walimpls.ErrTooLarge)
	require.True(t, walimpls.NotStored(err), "%v", err)
	var tl *walimpls.TooLargeError
	require.True(t, errors.As(err, &tl))
	require.Greater(t, tl.Size, tl.Limit)
	require.Greater(t, int64(tl.Limit), cfg.SegmentBytes-1024, "the limit is a segment's room for frames")
	require.Less(t, int64(tl.Limit), cfg.SegmentBytes)
	require.Contains(t, err.Error(), strconv.Itoa(tl.Limit))
	last, err := w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.EQ(b[6]), "nothing of the refused batch was stored")
	s.j.mu.Lock()
	require.Equal(t, fseg, s.j.fseg, "a refused batch starts no segment")
	s.j.mu.Unlock()

	c, err := batch("c", 8) // about 60 KiB: fits in an empty segment
	require.NoError(t, err)
	require.Equal(t, uint64(3), segOf(c[0]))
	got := readN(t, w, walimpls.DeliverAll(), 22)
	require.Len(t, checkBatches(t, got, "read"), 3)
	checkBatchPayloads(t, got, "read")
}

// The refusals decided before a batch is framed store nothing of it and are
// NotStored; a batch whose context ends while its round is under way is
// stored whole, with an unknown outcome; an empty batch stores nothing.
func TestAppendBatchRefusals(t *testing.T) {
	ctx := context.Background()
	fs := newFaultFS()
	cfg := testConfig(t.TempDir())
	s := openStore(t, withFS(cfg, fs))
	w := openWAL(t, s, "c", 1)
	notStored := func(err error, target error) {
		t.Helper()
		require.ErrorIs(t, err, target)
		require.True(t, walimpls.NotStored(err), "%v", err)
	}
	requireLast := func(want message.ID) {
		t.Helper()
		last, err := w.Last(ctx)
		require.NoError(t, err)
		require.True(t, last.EQ(want), "Last %s, want %s", last, want)
	}

	for _, empty := range [][]message.Message{nil, {}} {
		ids, err := w.AppendBatch(ctx, empty)
		require.NoError(t, err)
		require.Empty(t, ids)
	}
	last, err := w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.IsZero(), "an empty batch stored %s", last)

	first, err := w.AppendBatch(ctx, batchMessages("first", 3, 10))
	require.NoError(t, err)
	tooLarge := batchMessages("too-large", 3, 10)
	tooLarge[1], _ = message.New(make([]byte, cfg.MaxMessageBytes+1), nil)
	_, err = w.AppendBatch(ctx, tooLarge)
	notStored(err, walimpls.ErrTooLarge)
	var tl *walimpls.TooLargeError
	require.True(t, errors.As(err, &tl))
	require.Equal(t, cfg.MaxMessageBytes, tl.Limit)
	require.Contains(t, err.Error(), "message 1 of a batch of 3")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = w.AppendBatch(cancelled, batchMessages("cancelled", 2, 10))
	notStored(err, context.Canceled)
	_, err = openReadOnly(t, s, "c").AppendBatch(ctx, batchMessages("read-only", 2, 10))
	notStored(err, walimpls.ErrReadOnly)
	requireLast(first[2])

	// A context that ends while the batch's round is under way: unknown,
	// and in fact stored whole.
	g := fs.holdNextSync()
	ctx2, cancel2 := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := w.AppendBatch(ctx2, batchMessages("in-flight", 4, 10))
		done <- err
	}()
	<-g.entered
	cancel2()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, walimpls.NotStored(err), "framed before the context ended: the outcome is unknown")
	close(g.release)
	got := readN(t, w, walimpls.DeliverAll(), 7)
	require.Equal(t, map[string]bool{"first": true, "in-flight": true}, checkBatches(t, got, "read"))

	// A failed sync: unknown for the batch in that round, NotStored for
	// the batches the failed journal refuses afterwards.
	fs.failSync.Store(true)
	_, err = w.AppendBatch(ctx, batchMessages("doomed", 2, 10))
	require.ErrorIs(t, err, ErrJournalFailed)
	require.False(t, walimpls.NotStored(err))
	_, err = w.AppendBatch(ctx, batchMessages("refused", 2, 10))
	notStored(err, ErrJournalFailed)
	fs.failSync.Store(false)

	// Fenced by a later open (decided once for the batch), then closed.
	s2 := openStore(t, testConfig(t.TempDir()))
	w1 := openWAL(t, s2, "c", 1)
	w2 := openWAL(t, s2.NewOpener(), "c", 1)
	_, err = w1.AppendBatch(ctx, batchMessages("fenced", 2, 10))
	notStored(err, walimpls.ErrFenced)
	_, err = w1.AppendBatch(ctx, nil)
	notStored(err, walimpls.ErrFenced)
	last, err = w2.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.IsZero(), "the fenced batch stored nothing")
	require.NoError(t, w1.Close())
	_, err = w1.AppendBatch(ctx, batchMessages("closed", 2, 10))
	notStored(err, walimpls.ErrClosed)
	require.NoError(t, s2.Close())
	_, err = w2.AppendBatch(ctx, batchMessages("store-closed", 2, 10))
	notStored(err, walimpls.ErrClosed)
}

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
	s, err := New(context.Background(), withFS(cfg, fs))
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

// A batch whose write was torn at the tail of the log is dropped whole,
// whatever part of it was torn, and appends go on after the batch before
// it.
func TestRecoveryBatchCutShort(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(b []byte, batch []frameLoc) []byte
		reason string
		frames int
	}{
		{"bad crc in the last frame", func(b []byte, batch []frameLoc) []byte {
			b[batch[3].off+headerSize] ^= 0xff
			return b
		}, "batch cut short by bad frame (checksum or header)", 4},
		{"cut inside the third frame", func(b []byte, batch []frameLoc) []byte {
			return b[:batch[2].off+headerSize+2]
		}, "batch cut short by partial frame", 3},
		{"last frame zeroed", func(b []byte, batch []frameLoc) []byte {
			clear(b[batch[3].off : batch[3].off+batch[3].size])
			return b
		}, "batch cut short by zeroed space", 3},
		{"first frame zeroed", func(b []byte, batch []frameLoc) []byte {
			clear(b[batch[0].off : batch[0].off+batch[0].size])
			return b
		}, "zeroed space", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := testConfig(t.TempDir())
			s, err := New(context.Background(), cfg)
			require.NoError(t, err)
			w, err := s.Open(ctx, walimpls.Channel{Name: "c", Term: 1})
			require.NoError(t, err)
			a, err := w.AppendBatch(ctx, batchMessages("a", 3, 100))
			require.NoError(t, err)
			_, err = w.AppendBatch(ctx, batchMessages("b", 4, 100))
			require.NoError(t, err)
			require.NoError(t, s.Close())
			paths := segPaths(t, cfg.Dir)
			require.Len(t, paths, 1)
			msgs := messageFrames(segmentFrames(t, paths[0], 1))
			require.Len(t, msgs, 7)
			patch(t, paths[0], func(b []byte) []byte { return c.damage(b, msgs[3:]) })

			s = openStore(t, cfg)
			rep := s.Recovery()
			require.Equal(t, c.reason, rep.Reason)
			require.Equal(t, int64(msgs[3].off), rep.Offset, "cut at the batch's first frame")
			require.Equal(t, c.frames, rep.DroppedFrames)
			require.Positive(t, rep.DroppedBytes)
			w = openWAL(t, s, "c", 1)
			last, err := w.Last(ctx)
			require.NoError(t, err)
			require.True(t, last.EQ(a[2]), "the log ends after batch a: %s", last)
			// Appends go on where batch b was.
			after, err := w.AppendBatch(ctx, batchMessages("after", 2, 100))
			require.NoError(t, err)
			require.True(t, a[2].LT(after[0]))
			require.NoError(t, s.Close())

			s = openStore(t, cfg)
			require.Zero(t, s.Recovery().DroppedBytes)
			got := readN(t, openWAL(t, s, "c", 1), walimpls.DeliverAll(), 5)
			require.Equal(t, map[string]bool{"a": true, "after": true}, checkBatches(t, got, c.name))
			last, err = openReadOnly(t, s, "c").Last(ctx)
			require.NoError(t, err)
			require.True(t, last.EQ(after[1]))
		})
	}
}

// sameAs reports whether m and o hold the same files with the same bytes
// (for file systems that crash returned, whose bytes are all synced).
func (m *memFS) sameAs(o *memFS) bool {
	if len(m.names) != len(o.names) {
		return false
	}
	for name, f := range m.names {
		g, ok := o.names[name]
		if !ok || !bytes.Equal(f.data, g.data) {
			return false
		}
	}
	return true
}

// setFlags rewrites the flags of the frame at off of a segment file.
func setFlags(t *testing.T, path string, num uint64, off int, flags uint8) {
	t.Helper()
	patch(t, path, func(b []byte) []byte {
		h, body, sz, st := decodeFrame(b[off:], uint32(num))
		require.Equal(t, frameOK, st)
		h.flags = flags
		copy(b[off:off+sz], appendFrame(nil, h, body))
		return b
	})
}

// A batch cut short anywhere but at the tail of the log, or whose frames
// were synced, is corruption: Open fails and cuts nothing.
func TestRecoveryBatchCorruption(t *testing.T) {
	ctx := context.Background()
	t.Run("synced frames after a batch cut short", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		s := openStore(t, cfg)
		w := openWAL(t, s, "c", 1)
		_, err := w.AppendBatch(ctx, batchMessages("a", 3, 100))
		require.NoError(t, err)
		appendN(t, w, "after", 1) // written after a was synced
		require.NoError(t, s.Close())
		p := segPaths(t, cfg.Dir)[0]
		msgs := messageFrames(segmentFrames(t, p, 1))
		patch(t, p, func(b []byte) []byte { b[msgs[2].off+headerSize] ^= 0xff; return b })
		_, err = New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "batch cut short")
	})
	t.Run("a batch followed by another channel's message", func(t *testing.T) {
		cfg := testConfig(t.TempDir())
		s := openStore(t, cfg)
		wc, wd := openWAL(t, s, "c", 1), openWAL(t, s, "d", 1)
		appendN(t, wc, "c", 1)
		appendN(t, wd, "d", 1)
		require.NoError(t, s.Close())
		p := segPaths(t, cfg.Dir)[0]
		setFlags(t, p, 1, messageFrames(segmentFrames(t, p, 1))[0].off, flagMore)
		_, err := New(context.Background(), cfg)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "inside a batch")
	})
	for _, zeroSeal := range []bool{false, true} {
		t.Run(fmt.Sprintf("a batch cut short by the end of a middle segment (seal zeroed: %v)", zeroSeal), func(t *testing.T) {
			cfg := smallSegments(t.TempDir())
			fillSegments(t, cfg, 2)
			p := segPaths(t, cfg.Dir)[0]
			fr := segmentFrames(t, p, 1)
			seal := fr[len(fr)-1]
			require.Equal(t, typeSeal, seal.typ)
			setFlags(t, p, 1, fr[len(fr)-2].off, flagMore)
			want := "inside a batch"
			if zeroSeal {
				patch(t, p, func(b []byte) []byte { clear(b[seal.off : seal.off+seal.size]); return b })
				want = "in the middle of the log"
			}
			_, err := New(context.Background(), cfg)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), want)
		})
	}
	t.Run("flags on a frame that is not a message", func(t *testing.T) {
		h := frameHeader{seq: 1, seg: 1, typ: typeTerm, flags: flagMore}
		_, _, _, st := decodeFrame(appendFrame(nil, h, encodeTerm(1, "c")), 1)
		require.Equal(t, frameBad, st)
		h = frameHeader{seq: 1, seg: 1, typ: typeMessage, flags: 2}
		_, _, _, st = decodeFrame(appendFrame(nil, h, nil), 1)
		require.Equal(t, frameBad, st, "an unknown flag")
	})
}
