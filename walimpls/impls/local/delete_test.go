package local

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// liveSegments is the number of segments the store keeps.
func liveSegments(s *Store) int {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	return len(s.segments)
}

// readAll reads a channel from the start through its last message.
func readAll(t *testing.T, w walimpls.WALImpl) []message.Immutable {
	t.Helper()
	last, err := w.Last(context.Background())
	require.NoError(t, err)
	if last.IsZero() {
		return nil
	}
	return readUntil(t, w, last)
}

// readChannel reads every message of channel name: none when the channel
// does not exist (a read-only open of it is ErrNoChannel).
func readChannel(t *testing.T, o walimpls.Opener, name string) []message.Immutable {
	t.Helper()
	w, err := o.Open(context.Background(), walimpls.Channel{Name: name, Mode: walimpls.ReadOnly})
	if errors.Is(err, walimpls.ErrNoChannel) {
		return nil
	}
	require.NoError(t, err)
	defer w.Close()
	return readAll(t, w)
}

func requireDeletedFence(t *testing.T, err error, what string) {
	t.Helper()
	var fe *walimpls.FencedError
	require.Truef(t, errors.As(err, &fe) && fe.Deleted, "%s: want a *FencedError with Deleted, got %v", what, err)
	require.Truef(t, walimpls.NotStored(err), "%s: a refused record stores nothing: %v", what, err)
}

// A deletion is durable: after a restart the channel is still gone (no
// message, no term), its name opens as a new channel at any term, the
// other channel kept everything, and the segments that only the deleted
// channel held were freed without recovery taking them for missing.
func TestDeleteSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	cfg := smallSegments(t.TempDir())
	s := openStore(t, cfg)
	gone := openWAL(t, s, "gone", 7)
	var goneIDs []message.ID
	for len(segPaths(t, cfg.Dir)) < 4 {
		goneIDs = append(goneIDs, appendBig(t, gone, len(goneIDs)))
	}
	kept := openWAL(t, s, "kept", 3)
	keptIDs := appendN(t, kept, "kept", 5)
	segsBefore := liveSegments(s)
	paths := segPaths(t, cfg.Dir)
	start, _ := segmentStartOf(t, paths[len(paths)-1])
	require.Len(t, start.chans, 1, "the last segment started before the delete lists the channel")
	goneID := start.chans[0].id

	require.NoError(t, s.Delete(ctx, "gone"))
	_, err := walimpls.Append(ctx, gone, msg(t, "late"))
	requireDeletedFence(t, err, "append after delete")
	// Only the last segment holds a live message ("kept"'s).
	require.Eventually(t, func() bool { return liveSegments(s) == 1 }, 10*time.Second, time.Millisecond,
		"the segments of the deleted channel were not freed (%d before)", segsBefore)
	require.Len(t, segPaths(t, cfg.Dir), 1)
	// The next segment lists the live channel only.
	for len(segPaths(t, cfg.Dir)) == 1 {
		keptIDs = append(keptIDs, appendBig(t, kept, 0))
	}
	start, _ = segmentStartOf(t, segPaths(t, cfg.Dir)[1])
	require.Len(t, start.chans, 1)
	require.NotEqual(t, goneID, start.chans[0].id, "a start frame after the delete lists the deleted channel")
	require.Equal(t, "kept", start.chans[0].name)
	require.NoError(t, s.Close())

	s = openStore(t, cfg)
	require.Zero(t, s.Recovery().DroppedBytes)
	_, err = s.Open(ctx, walimpls.Channel{Name: "gone", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel, "a deleted channel came back after a restart")
	// Its term went with it: a lower term opens it.
	fresh := openWAL(t, s, "gone", 0)
	newIDs := appendN(t, fresh, "new", 2)
	require.True(t, goneIDs[len(goneIDs)-1].LT(newIDs[0]), "IDs keep increasing over the store")
	// The other channel kept its messages and its term.
	got := readAll(t, openWAL(t, s, "kept", 3))
	require.Len(t, got, len(keptIDs))
	for i, m := range got {
		require.True(t, m.ID().EQ(keptIDs[i]))
	}
	require.Equal(t, "kept-0", string(got[0].Payload()))
	_, err = s.Open(ctx, walimpls.Channel{Name: "kept", Term: 2})
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.NoError(t, s.Close())

	// Once more: the new channel holds only what it was given.
	s = openStore(t, cfg)
	got = readChannel(t, s, "gone")
	require.Len(t, got, 2)
	for i, m := range got {
		require.True(t, m.ID().EQ(newIDs[i]))
		require.Equal(t, "new-"+itoa(i), string(m.Payload()))
	}
	_, err = s.Open(ctx, walimpls.Channel{Name: "gone", Term: 0})
	require.NoError(t, err, "the new channel's term is 0")
}

// A scanner of a deleted channel hands over what it had read ahead, then
// ends with ErrPositionGone; a Read after the delete is ErrPositionGone.
func TestDeleteLetsScannersFinishTheirReadAhead(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testConfig(t.TempDir()))
	w := openWAL(t, s, "c", 1)
	ids := appendN(t, w, "m", 10)
	sc, err := w.Read(ctx, walimpls.ReadOption{Name: "ahead", DeliverPolicy: cursor.All(), ReadAheadBytes: 1 << 20})
	require.NoError(t, err)
	defer sc.Close()
	// The ten messages were published before Read: the scanner decoded all
	// of them at once, and hands over the second when this one is taken.
	var got []message.Immutable
	select {
	case m := <-sc.Chan():
		got = append(got, m)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "nothing delivered")
	}
	require.NoError(t, s.Delete(ctx, "c"))
	for m := range sc.Chan() {
		got = append(got, m)
	}
	<-sc.Done()
	require.ErrorIs(t, sc.Error(), walimpls.ErrPositionGone)
	require.Contains(t, sc.Error().Error(), "deleted")
	require.Len(t, got, len(ids), "the read-ahead is handed over")
	for i, m := range got {
		require.True(t, m.ID().EQ(ids[i]))
	}
	_, err = w.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.All()})
	require.ErrorIs(t, err, walimpls.ErrPositionGone)
	requireDeletedFence(t, w.Truncate(ctx, ids[5]), "truncate after delete")
}

// Delete races a writer opened before it, an Open of the name and another
// Delete, over and over: nothing is lost or misplaced. The earlier writer
// never stores into the channel that follows; each Delete returns with
// that writer finished; the racing Open either got the deleted channel
// (its appends then fail with a deletion, or all succeeded before the
// Delete took them) or the new one (and then holds every one of its
// appends, and nothing else); and a restart reads back the same.
func TestDeleteRacesOpenAndAppend(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 11))
	const rounds, w2Appends = 30, 20
	newChannel := 0
	for round := range rounds {
		name := "race-" + itoa(round)
		s, err := New(context.Background(), cfg)
		require.NoError(t, err)
		nodeA, nodeB := s.NewOpener(), s.NewOpener()
		w1, err := nodeA.Open(ctx, walimpls.Channel{Name: name, Term: 1})
		require.NoError(t, err)
		appendN(t, w1, "w1", 2)

		var (
			wg          sync.WaitGroup
			start       = make(chan struct{})
			w1Err       error
			w2Acked     []message.ID
			w2Err       error
			w2OpenErr   error
			afterDelete [2]error // w1's append once each Delete returned
			deleteErr   [2]error
			// seq orders the racers' events: the racing Open's start and
			// each Delete's return.
			seq        atomic.Int64
			openSeq    int64
			deletedSeq [2]int64
		)
		wg.Add(4)
		openDelay := time.Duration(rng.IntN(3000)) * time.Microsecond
		go func() {
			defer wg.Done()
			<-start
			for {
				if _, err := walimpls.Append(ctx, w1, msg(t, "w1-late")); err != nil {
					w1Err = err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			// Delays only vary the interleaving; every outcome is checked.
			time.Sleep(openDelay)
			openSeq = seq.Add(1)
			w2, err := nodeB.Open(ctx, walimpls.Channel{Name: name, Term: 5})
			if err != nil {
				w2OpenErr = err
				return
			}
			for i := range w2Appends {
				id, err := walimpls.Append(ctx, w2, msg(t, "w2-"+itoa(i)))
				if err != nil {
					w2Err = err
					return
				}
				w2Acked = append(w2Acked, id)
			}
		}()
		for k, o := range []walimpls.Opener{nodeA, nodeB} {
			delay := time.Duration(rng.IntN(3000)) * time.Microsecond
			go func() {
				defer wg.Done()
				<-start
				time.Sleep(delay) // varies the interleaving, as openDelay does
				deleteErr[k] = o.Delete(ctx, name)
				deletedSeq[k] = seq.Add(1)
				_, afterDelete[k] = walimpls.Append(ctx, w1, msg(t, "w1-after"))
			}()
		}
		close(start)
		wg.Wait()

		what := "round " + itoa(round)
		require.NoError(t, w2OpenErr, what)
		for k := range 2 {
			require.NoError(t, deleteErr[k], what)
			requireDeletedFence(t, afterDelete[k], what+": the first writer once Delete returned")
		}
		require.ErrorIs(t, w1Err, walimpls.ErrFenced, what)
		require.True(t, walimpls.NotStored(w1Err), what)
		check := func(got []message.Immutable, when string) {
			for _, m := range got {
				require.Truef(t, strings.HasPrefix(string(m.Payload()), "w2-"), "%s %s: %q in the channel after the delete", what, when, m.Payload())
			}
			if len(got) == 0 {
				// The racing Open got a channel that a Delete took: it
				// began before a Delete returned, and its appends failed
				// with the deletion or all were stored before it.
				require.Truef(t, openSeq < max(deletedSeq[0], deletedSeq[1]), "%s %s: the racing writer opened after both Deletes, and its %d acknowledged appends are gone", what, when, len(w2Acked))
				if w2Err != nil || len(w2Acked) < w2Appends {
					requireDeletedFence(t, w2Err, what+" "+when+": the racing writer of a deleted channel")
				}
				return
			}
			require.NoError(t, w2Err, what)
			require.Len(t, got, len(w2Acked), what+" "+when)
			for i, m := range got {
				require.True(t, m.ID().EQ(w2Acked[i]), what+" "+when)
			}
		}
		got := readChannel(t, nodeA, name)
		check(got, "before the restart")
		if len(got) > 0 {
			newChannel++
		}
		require.NoError(t, s.Close())
		s, err = New(context.Background(), cfg)
		require.NoError(t, err)
		check(readChannel(t, s, name), "after the restart")
		require.NoError(t, s.Close())
	}
	t.Logf("%d rounds: the racing Open got the new channel in %d, a deleted one in %d", rounds, newChannel, rounds-newChannel)
}

// Channel ids are never reused, and there are 2^32-2 of them: the open that
// would need one more is refused with nothing framed, also after a restart
// and after the last channel was deleted.
func TestChannelIDsRunOut(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	s.j.mu.Lock()
	s.j.nextChan = maxChannelID - 1
	s.j.mu.Unlock()
	a := openWAL(t, s, "a", 1)
	ids := appendN(t, a, "a", 2)
	_, err := s.Open(ctx, walimpls.Channel{Name: "b", Term: 1})
	require.ErrorContains(t, err, "as many as channel ids allow")
	require.NotErrorIs(t, err, walimpls.ErrFenced)
	require.NoError(t, s.Close())

	s = openStore(t, cfg)
	require.Len(t, readAll(t, openWAL(t, s, "a", 1)), len(ids))
	_, err = s.Open(ctx, walimpls.Channel{Name: "b", Term: 1})
	require.ErrorContains(t, err, "as many as channel ids allow")
	require.NoError(t, s.Delete(ctx, "a"))
	_, err = s.Open(ctx, walimpls.Channel{Name: "a", Term: 1})
	require.ErrorContains(t, err, "as many as channel ids allow", "the deleted channel's id is not reused")
	// Reading needs no id.
	require.Empty(t, readChannel(t, s, "a"))
}

// appendRawFrame writes a frame by hand after the last frame of the last
// segment (where the end marker is), followed by a new end marker.
func appendRawFrame(t *testing.T, dir string, typ frameType, chanID uint32, body []byte) {
	t.Helper()
	paths := segPaths(t, dir)
	p := paths[len(paths)-1]
	num, ok := parseSegmentName(p[strings.LastIndex(p, "wal-"):])
	require.True(t, ok)
	patch(t, p, func(b []byte) []byte {
		off, seq := 0, uint64(0)
		for {
			h, _, sz, st := decodeFrame(b[off:], uint32(num))
			if st != frameOK {
				break
			}
			off, seq = off+sz, h.seq
		}
		fr := appendFrame(nil, frameHeader{seq: seq + 1, seg: uint32(num), chanID: chanID, typ: typ}, body)
		fr = append(fr, make([]byte, headerSize)...)
		if len(b) < off+len(fr) {
			b = append(b, make([]byte, off+len(fr)-len(b))...)
		}
		copy(b[off:], fr)
		return b
	})
}

// Recovery replays a delete frame, and refuses the ones the journal never
// writes: of an undefined id, with another name than the id's, or followed
// by a frame of the deleted id.
func TestRecoveryOfDeleteFrames(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) Config {
		cfg := testConfig(t.TempDir())
		s, err := New(context.Background(), cfg)
		require.NoError(t, err)
		w, err := s.Open(ctx, walimpls.Channel{Name: "a", Term: 4}) // id 1
		require.NoError(t, err)
		appendN(t, w, "a", 3)
		require.NoError(t, s.Close())
		return cfg
	}
	t.Run("replayed", func(t *testing.T) {
		cfg := setup(t)
		appendRawFrame(t, cfg.Dir, typeDelete, 1, encodeDelete("a"))
		s := openStore(t, cfg)
		require.Empty(t, readChannel(t, s, "a"))
		_, err := s.Open(ctx, walimpls.Channel{Name: "a", Term: 0})
		require.NoError(t, err, "the deleted channel's term went with it")
	})
	for _, c := range []struct {
		name, want string
		write      func(t *testing.T, dir string)
	}{
		{"undefined id", "delete of undefined channel 2", func(t *testing.T, dir string) {
			appendRawFrame(t, dir, typeDelete, 2, encodeDelete("a"))
		}},
		{"another name", `names "b", but the id was defined as "a"`, func(t *testing.T, dir string) {
			appendRawFrame(t, dir, typeDelete, 1, encodeDelete("b"))
		}},
		{"message after the delete", "message of undefined channel 1", func(t *testing.T, dir string) {
			appendRawFrame(t, dir, typeDelete, 1, encodeDelete("a"))
			m, _ := message.New([]byte("ghost"), nil)
			appendRawFrame(t, dir, typeMessage, 1, encodeMessage(m))
		}},
		{"truncate after the delete", "truncate of undefined channel 1", func(t *testing.T, dir string) {
			appendRawFrame(t, dir, typeDelete, 1, encodeDelete("a"))
			appendRawFrame(t, dir, typeTruncate, 1, encodeTruncate(3, 2))
		}},
		{"the id defined again", "defines channel id 1 again", func(t *testing.T, dir string) {
			appendRawFrame(t, dir, typeDelete, 1, encodeDelete("a"))
			appendRawFrame(t, dir, typeTerm, 1, encodeTerm(1, "a"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := setup(t)
			c.write(t, cfg.Dir)
			_, err := New(context.Background(), cfg)
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// segmentStartOf decodes the start frame of a segment file.
func segmentStartOf(t *testing.T, path string) (segmentStart, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	num, ok := parseSegmentName(path[strings.LastIndex(path, "wal-"):])
	require.True(t, ok)
	h, body, sz, st := decodeFrame(b, uint32(num))
	require.Equal(t, frameOK, st, path)
	require.Equal(t, typeSegmentStart, h.typ, path)
	start, err := decodeSegmentStart(body)
	require.NoError(t, err, path)
	return start, sz
}
