package local

import (
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

	"github.com/streamwal/streamwal/cursor"
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
			got := readN(t, openWAL(t, o, name, 2), cursor.All(), acked[name])
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
	got := readN(t, w, cursor.All(), 22)
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
	got := readN(t, w, cursor.All(), 7)
	require.Equal(t, map[string]bool{"first": true, "in-flight": true}, checkBatches(t, got, "read"))

	// A failed sync: unknown for the batch in that round, NotStored for
	// the batches the failed journal refuses afterwards.
	fs.failSync.Set(true)
	_, err = w.AppendBatch(ctx, batchMessages("doomed", 2, 10))
	require.ErrorIs(t, err, ErrJournalFailed)
	require.False(t, walimpls.NotStored(err))
	_, err = w.AppendBatch(ctx, batchMessages("refused", 2, 10))
	notStored(err, ErrJournalFailed)
	fs.failSync.Set(false)

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
