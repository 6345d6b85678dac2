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
	sc, err := w.Read(ctx, walimpls.ReadOption{Name: "ahead", DeliverPolicy: walimpls.DeliverAll(), ReadAheadBytes: 1 << 20})
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
	_, err = w.Read(ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverAll()})
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

// A power loss at every step of a run of deletes (before each write, sync,
// rename, removal and directory sync of the store, keeping every unsynced
// byte, none, or a random mix), each delete followed by a new channel
// under the freed name: recovery never reports corruption; a channel whose
// Delete returned is gone (no old message, its term forgotten), whatever
// segments were freed since; a channel whose Delete had not started is
// whole with its term; one whose Delete was under way is one or the
// other, never a mix; and the store recovery leaves opens again cleanly.
func TestPowerLossAtEveryStepOfADelete(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncNone} {
		t.Run(string(policy), func(t *testing.T) { powerLossDuringDeletes(t, policy) })
	}
}

func powerLossDuringDeletes(t *testing.T, policy SyncPolicy) {
	ctx := context.Background()
	const channels, perChannel = 6, 8
	name := func(k int) string { return "d" + itoa(k) }
	payload := func(kind string, k, i int) string {
		return kind + "-" + itoa(k) + "-" + itoa(i) + "-" + strings.Repeat("x", 4000)
	}
	fs := newMemFS()
	cfg := Config{Dir: "/root", SegmentBytes: 64 << 10, MaxMessageBytes: 8 << 10, Sync: policy}
	s, err := New(context.Background(), withFS(cfg, fs))
	require.NoError(t, err)
	for k := range channels {
		w, err := s.Open(ctx, walimpls.Channel{Name: name(k), Term: 2})
		require.NoError(t, err)
		for i := range perChannel {
			_, err := walimpls.Append(ctx, w, msg(t, payload("old", k, i)))
			require.NoError(t, err)
		}
	}
	// A term frame is synced whatever the policy: with it every message
	// above.
	_, err = s.Open(ctx, walimpls.Channel{Name: "sync", Term: 1})
	require.NoError(t, err)

	type snapshot struct {
		fs            *memFS
		step          string
		started, done int // deletes started and returned before it
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 5))
	all, none := crashExtremes()
	var (
		mu            sync.Mutex
		started, done int
		snaps         []snapshot
	)
	hook := func(op, file string) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range []*rand.Rand{all, none, rng} {
			snaps = append(snaps, snapshot{fs: fs.crash(r), step: op + " " + file[strings.LastIndex(file, "/")+1:], started: started, done: done})
		}
	}
	fs.before.Store(&hook)
	for k := range channels {
		mu.Lock()
		started = k + 1
		mu.Unlock()
		require.NoError(t, s.Delete(ctx, name(k)))
		mu.Lock()
		done = k + 1
		mu.Unlock()
		w, err := s.Open(ctx, walimpls.Channel{Name: name(k), Term: 0})
		require.NoError(t, err)
		_, err = walimpls.Append(ctx, w, msg(t, payload("new", k, 0)))
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	fs.before.Store(nil)

	var underWayGone, underWayWhole, freeing int
	for i, sn := range snaps {
		what := "power loss " + itoa(i) + ", before " + sn.step
		if strings.HasPrefix(sn.step, "remove wal-") || strings.HasPrefix(sn.step, "rename spare-") {
			freeing++
		}
		s, err := New(context.Background(), withFS(cfg, sn.fs))
		require.NoError(t, err, what)
		for k := range channels {
			var old, fresh int
			for _, m := range readChannel(t, s, name(k)) {
				p := string(m.Payload())
				switch {
				case strings.HasPrefix(p, "old-"):
					require.Equal(t, payload("old", k, old), p, "%s: channel %d", what, k)
					old++
				case strings.HasPrefix(p, "new-"):
					require.Equal(t, payload("new", k, fresh), p, "%s: channel %d", what, k)
					fresh++
				default:
					require.Failf(t, "foreign message", "%s: channel %d: %.12q", what, k, p)
				}
			}
			require.Truef(t, old == 0 || old == perChannel, "%s: channel %d kept %d of its %d messages", what, k, old, perChannel)
			require.Falsef(t, old > 0 && fresh > 0, "%s: channel %d mixes the deleted channel and the new one", what, k)
			switch {
			case k < sn.done:
				require.Zerof(t, old, "%s: channel %d was deleted, and came back", what, k)
			case k >= sn.started:
				require.Equalf(t, perChannel, old, "%s: channel %d was never deleted", what, k)
			case old == 0:
				underWayGone++
			default:
				underWayWhole++
			}
			_, err := s.Open(ctx, walimpls.Channel{Name: name(k), Term: 1})
			if old > 0 {
				require.ErrorIsf(t, err, walimpls.ErrFenced, "%s: channel %d kept its messages but not its term 2", what, k)
			} else {
				require.NoErrorf(t, err, "%s: channel %d: the deleted channel's term stayed", what, k)
			}
		}
		require.NoError(t, s.Close(), what)

		// What recovery left opens again, without anything to repair.
		s, err = New(context.Background(), withFS(cfg, sn.fs))
		require.NoError(t, err, what)
		require.Zero(t, s.Recovery().DroppedBytes, what)
		require.NoError(t, s.Close(), what)
	}
	t.Logf("%d power losses checked; a delete under way was lost in %d and kept in %d; %d before a freed segment went",
		len(snaps), underWayWhole, underWayGone, freeing)
	require.Positive(t, underWayGone, "some power loss kept a delete frame written and not yet returned")
	require.Positive(t, underWayWhole, "some power loss lost a delete frame not yet synced")
	require.Positive(t, freeing, "the deletes freed segments")
}
