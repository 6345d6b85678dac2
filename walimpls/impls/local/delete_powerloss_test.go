package local

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/walimpls"
)

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
	s, err := New(context.Background(), withFS(cfg, fs.hooked()))
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
