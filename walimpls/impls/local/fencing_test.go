package local

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// A later ReadWrite open at the same term fences the earlier WAL, on another
// opener (node) of the same store: once the later Open has returned, no
// append of the earlier WAL is acknowledged, and every acknowledged append
// of either is read back, the earlier writer's before the later one's.
func TestSameTermLaterOpenFencesEarlier(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNone} {
		t.Run(string(policy), func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Sync = policy
			s := openStore(t, cfg)
			n1, n2 := s.NewOpener(), s.NewOpener()
			t.Cleanup(func() { _ = n1.Close(); _ = n2.Close() })
			ctx := context.Background()
			const term = 5
			w1 := openWAL(t, n1, "c", term)

			var (
				mu          sync.Mutex
				acked1      []message.ID
				opened      atomic.Bool
				problems    = make(chan string, 64)
				wg          sync.WaitGroup
				fencedCount atomic.Int64
			)
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						m, _ := message.New([]byte(fmt.Sprintf("one-%d-%d", g, i)), map[string]string{"writer": "one"})
						startedAfter := opened.Load()
						id, err := walimpls.Append(ctx, w1, m)
						if err == nil {
							if startedAfter {
								problems <- fmt.Sprintf("append of the fenced WAL acknowledged as %s after the later Open returned", id)
								return
							}
							mu.Lock()
							acked1 = append(acked1, id)
							mu.Unlock()
							continue
						}
						var fe *walimpls.FencedError
						switch {
						case !errors.As(err, &fe):
							problems <- fmt.Sprintf("append of the earlier WAL: %v, want a *walimpls.FencedError", err)
						case fe.Term != term || fe.CurrentTerm != term:
							problems <- fmt.Sprintf("fenced error %+v, want Term = CurrentTerm = %d", *fe, term)
						case !walimpls.NotStored(err):
							problems <- fmt.Sprintf("a fence decided before framing must be NotStored: %v", err)
						}
						fencedCount.Add(1)
						return
					}
				}()
			}
			// The earlier writer is well under way before the takeover.
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(acked1) >= 20
			}, 10*time.Second, time.Millisecond)

			w2 := openWAL(t, n2, "c", term)
			opened.Store(true)
			var acked2 []message.ID
			var mu2 sync.Mutex
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 25 {
						m, _ := message.New([]byte(fmt.Sprintf("two-%d-%d", g, i)), map[string]string{"writer": "two"})
						id, err := walimpls.Append(ctx, w2, m)
						if err != nil {
							problems <- fmt.Sprintf("append of the later WAL: %v", err)
							return
						}
						mu2.Lock()
						acked2 = append(acked2, id)
						mu2.Unlock()
					}
				}()
			}
			wg.Wait()
			close(problems)
			for p := range problems {
				require.Fail(t, p)
			}
			require.Equal(t, int64(4), fencedCount.Load(), "every appender of the earlier WAL ends fenced")

			// Fenced for good: appends and truncates, whatever they ask.
			for range 3 {
				_, err := walimpls.Append(ctx, w1, msg(t, "late"))
				require.ErrorIs(t, err, walimpls.ErrFenced)
				require.True(t, walimpls.NotStored(err))
			}
			require.ErrorIs(t, w1.Truncate(ctx, acked1[0]), walimpls.ErrFenced)

			// Every acknowledged append is read back, the earlier writer's
			// before the later one's.
			ro := openReadOnly(t, s, "c")
			last, err := ro.Last(ctx)
			require.NoError(t, err)
			got := readUntil(t, ro, last)
			pos := map[string]int{}
			for i, m := range got {
				pos[m.ID().Marshal()] = i
			}
			first2 := len(got)
			for _, id := range acked2 {
				i, ok := pos[id.Marshal()]
				require.Truef(t, ok, "acknowledged append %s of the later WAL lost", id)
				first2 = min(first2, i)
			}
			for _, id := range acked1 {
				i, ok := pos[id.Marshal()]
				require.Truef(t, ok, "acknowledged append %s of the earlier WAL lost", id)
				require.Less(t, i, first2, "an append of the earlier WAL after the later WAL's first")
			}
			require.Len(t, got, len(acked1)+len(acked2), "nothing but acknowledged appends")

			// The later owner may close and reopen at the same term; the
			// earlier one stays fenced.
			require.NoError(t, w2.Close())
			w3 := openWAL(t, n2, "c", term)
			appendN(t, w3, "three", 2)
			_, err = walimpls.Append(ctx, w1, msg(t, "late"))
			require.ErrorIs(t, err, walimpls.ErrFenced)
		})
	}
}

// The fencing decision is taken again when a record is framed, under the
// journal's mutex: a record of a writer whose claim was overtaken is refused
// and nothing is framed, even when it passed the WAL's early checks.
func TestFencingIsDecidedAtFraming(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	ctx := context.Background()
	w1 := openWAL(t, s, "c", 1).(*wal)
	ids := appendN(t, w1, "one", 3)
	openWAL(t, s.NewOpener(), "c", 1)
	before := s.j.framedLastSeq(w1.ch)

	for _, r := range []request{
		{kind: reqAppend, ch: w1.ch, term: 1, gen: w1.gen, bodies: [][]byte{encodeMessage(msg(t, "stale"))}},
		{kind: reqAppend, ch: w1.ch, term: 1, gen: w1.gen, bodies: [][]byte{encodeMessage(msg(t, "stale-1")), encodeMessage(msg(t, "stale-2"))}},
		{kind: reqTruncate, ch: w1.ch, term: 1, gen: w1.gen, keep: 2, lastRemoved: 1},
	} {
		_, err := s.j.submit(ctx, r)
		var fe *walimpls.FencedError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, int64(1), fe.CurrentTerm)
		require.True(t, walimpls.NotStored(err))
	}
	require.Equal(t, before, s.j.framedLastSeq(w1.ch), "nothing framed")
	got := readN(t, w1, cursor.All(), 3)
	require.True(t, got[0].ID().EQ(ids[0]), "nothing truncated")
}

// A fenced writer's Truncate - fenced by a higher term or by a later open of
// its own term - is ErrFenced whatever its position, and removes nothing,
// also across a reopen of the store.
func TestFencedTruncateRemovesNothing(t *testing.T) {
	for _, c := range []struct {
		name            string
		term, laterTerm int64
	}{
		{name: "lower term", term: 1, laterTerm: 2},
		{name: "same term", term: 3, laterTerm: 3},
		{name: "term zero", term: 0, laterTerm: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			s := openStore(t, cfg)
			ctx := context.Background()
			w1 := openWAL(t, s, "c", c.term)
			ids := appendN(t, w1, "m", 10)
			w2 := openWAL(t, s.NewOpener(), "c", c.laterTerm)

			for _, upTo := range []message.ID{ids[5], ids[0], ids[9], message.NewSeqID(Name, 1<<40), message.NewSeqID("other", 3)} {
				err := w1.Truncate(ctx, upTo)
				require.ErrorIs(t, err, walimpls.ErrFenced, "truncate to %s", upTo)
				var fe *walimpls.FencedError
				require.True(t, errors.As(err, &fe))
				require.Equal(t, c.term, fe.Term)
				require.Equal(t, c.laterTerm, fe.CurrentTerm)
			}
			// Scanners and Last keep working for the stale owner.
			last, err := w1.Last(ctx)
			require.NoError(t, err)
			require.True(t, last.EQ(ids[9]))
			got := readN(t, w1, cursor.All(), 10)
			require.True(t, got[0].ID().EQ(ids[0]))

			// The later owner truncates; the stale one still cannot.
			require.NoError(t, w2.Truncate(ctx, ids[2]))
			require.ErrorIs(t, w1.Truncate(ctx, ids[5]), walimpls.ErrFenced)
			require.NoError(t, s.Close())

			s = openStore(t, cfg)
			ro := openReadOnly(t, s, "c")
			got = readN(t, ro, cursor.All(), 8)
			require.True(t, got[0].ID().EQ(ids[2]), "only the later owner's truncation is stored")
		})
	}
}

// Errors decided before the record reached the journal's batch are marked
// NotStored; an error after that leaves the outcome unknown.
func TestAppendNotStored(t *testing.T) {
	ctx := context.Background()
	fs := newFaultFS()
	s := openStore(t, withFS(testConfig(t.TempDir()), fs))
	w := openWAL(t, s, "c", 1)

	notStored := func(err error, target error) {
		t.Helper()
		require.ErrorIs(t, err, target)
		require.True(t, walimpls.NotStored(err), "%v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := walimpls.Append(cancelled, w, msg(t, "x"))
	notStored(err, context.Canceled)
	_, err = walimpls.Append(ctx, w, msg(t, string(make([]byte, 64<<10))))
	notStored(err, walimpls.ErrTooLarge)
	ro := openReadOnly(t, s, "c")
	_, err = walimpls.Append(ctx, ro, msg(t, "x"))
	notStored(err, walimpls.ErrReadOnly)

	// A context that ends while the record's round is under way: unknown,
	// and in fact stored.
	g := fs.holdNextSync()
	ctx2, cancel2 := context.WithCancel(ctx)
	done := make(chan error, 1)
	inFlight := msg(t, "in flight")
	go func() {
		_, err := walimpls.Append(ctx2, w, inFlight)
		done <- err
	}()
	<-g.entered
	cancel2()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, walimpls.NotStored(err), "framed before the context ended: the outcome is unknown")
	close(g.release)
	got := readN(t, w, cursor.All(), 1)
	require.Equal(t, "in flight", string(got[0].Payload()))

	// A failed sync: unknown for the append in that round, NotStored for
	// those refused by the failed journal afterwards.
	fs.failSync.Set(true)
	_, err = walimpls.Append(ctx, w, msg(t, "doomed"))
	require.ErrorIs(t, err, ErrJournalFailed)
	require.False(t, walimpls.NotStored(err), "written before its sync failed: the outcome is unknown")
	_, err = walimpls.Append(ctx, w, msg(t, "refused"))
	notStored(err, ErrJournalFailed)
	fs.failSync.Set(false)

	// Fenced, then closed.
	s2 := openStore(t, testConfig(t.TempDir()))
	w1 := openWAL(t, s2, "c", 1)
	openWAL(t, s2.NewOpener(), "c", 1)
	_, err = walimpls.Append(ctx, w1, msg(t, "x"))
	notStored(err, walimpls.ErrFenced)
	require.NoError(t, w1.Close())
	_, err = walimpls.Append(ctx, w1, msg(t, "x"))
	notStored(err, walimpls.ErrClosed)
	w3 := openWAL(t, s2, "d", 1)
	require.NoError(t, s2.Close())
	_, err = walimpls.Append(ctx, w3, msg(t, "x"))
	notStored(err, walimpls.ErrClosed)
}

func TestLast(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	w := openWAL(t, s, "c", 1)
	last, err := w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.IsZero(), "a channel that never held a message")
	_, err = s.Open(ctx, walimpls.Channel{Name: "never", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "a read-only open of a channel never opened creates nothing")

	ids := appendN(t, w, "c", 5)
	appendN(t, openWAL(t, s, "d", 1), "d", 3) // another channel's messages are not c's
	for _, x := range []walimpls.WALImpl{w, openReadOnly(t, s, "c")} {
		last, err = x.Last(ctx)
		require.NoError(t, err)
		require.True(t, last.EQ(ids[4]), "got %s", last)
	}
	// Truncate keeps the last message.
	require.NoError(t, w.Truncate(ctx, ids[4]))
	last, err = w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.EQ(ids[4]))

	// A fenced WAL still answers, with the later owner's messages.
	w2 := openWAL(t, s.NewOpener(), "c", 2)
	id := appendN(t, w2, "c2", 1)[0]
	last, err = w.Last(ctx)
	require.NoError(t, err)
	require.True(t, last.EQ(id))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = w.Last(cancelled)
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, s.Close())
	_, err = w.Last(ctx)
	require.ErrorIs(t, err, walimpls.ErrClosed)

	// It survives a reopen.
	s = openStore(t, cfg)
	last, err = openReadOnly(t, s, "c").Last(ctx)
	require.NoError(t, err)
	require.True(t, last.EQ(id))
}

// Last covers every append acknowledged before it is called, with every
// sync policy (with SyncNone an append is acknowledged before the flusher
// publishes it), and the ID it returns can be read at once.
func TestLastCoversAcknowledgedAppends(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		t.Run(string(policy), func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Sync = policy
			s := openStore(t, cfg)
			w := openWAL(t, s, "c", 1).(*wal)
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						m, _ := message.New([]byte(fmt.Sprintf("%d-%d", g, i)), nil)
						id, err := walimpls.Append(ctx, w, m)
						if err != nil {
							errs <- err
							return
						}
						last, err := w.Last(ctx)
						if err != nil {
							errs <- err
							return
						}
						if last.LT(id) {
							errs <- fmt.Errorf("Last %s below the acknowledged %s", last, id)
							return
						}
						if i%25 == 0 {
							// Published: a read from it delivers it at once.
							w.ch.mu.RLock()
							published := w.ch.lastSeq
							w.ch.mu.RUnlock()
							if seq, _ := message.SeqOf(Name, last); uint64(seq) > published {
								errs <- fmt.Errorf("Last %s not published (published up to %d)", last, published)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
		})
	}
}

func openReadOnly(t *testing.T, o walimpls.Opener, name string) walimpls.WALImpl {
	t.Helper()
	w, err := o.Open(context.Background(), walimpls.Channel{Name: name, Mode: walimpls.ReadOnly})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}
