package consumers_test

import (
	"context"
	stderrors "errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	crerrors "github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = etcdtest.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(etcdtest.Main(m, srv))
}

// eachStore runs f on bbolt and on etcd; stores() is another process on
// the same data (on bbolt, the one store a process holds).
func eachStore(t *testing.T, f func(t *testing.T, stores func() meta.Store)) {
	t.Run("bolt", func(t *testing.T) {
		s, err := boltstore.Open(filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		f(t, func() meta.Store { return s })
	})
	t.Run("etcd", func(t *testing.T) {
		prefix := etcdtest.Prefix(t)
		f(t, func() meta.Store {
			cli := etcdtest.Client(t, srv.Endpoints())
			s, err := etcdstore.New(cli, etcdstore.Options{Prefix: prefix})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
	})
}

func newStore(t *testing.T, kv meta.Store) *consumers.Store {
	s, err := consumers.NewStore(kv, consumers.Options{})
	require.NoError(t, err)
	return s
}

// cp is a checkpoint at position seq with timetick tt; parse reads it back.
func cp(tt uint64, seq int64) cursor.Checkpoint {
	return cursor.Checkpoint{Position: message.NewSeqID("test", seq), TimeTick: tt}
}

func parse(s string) (cursor.Checkpoint, error) {
	ttText, seqText, ok := strings.Cut(s, "@")
	if !ok {
		return cursor.Checkpoint{}, fmt.Errorf("%q: %w", s, cursor.ErrCorruptCheckpoint)
	}
	tt, err1 := strconv.ParseUint(ttText, 10, 64)
	seq, err2 := strconv.ParseInt(seqText, 10, 64)
	if err := stderrors.Join(err1, err2); err != nil {
		return cursor.Checkpoint{}, fmt.Errorf("%q: %w: %w", s, cursor.ErrCorruptCheckpoint, err)
	}
	return cp(tt, seq), nil
}

// isBoth checks err against target with the standard library and with
// cockroachdb/errors: users reach for either.
func isBoth(t *testing.T, err, target error) {
	t.Helper()
	require.Truef(t, stderrors.Is(err, target), "standard errors.Is(%v, %v)", err, target)
	require.Truef(t, crerrors.Is(err, target), "cockroachdb errors.Is(%v, %v)", err, target)
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A checkpoint only moves forward; the same one again writes nothing; a
// lower term than the stored one's is refused.
func TestCommitRules(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := ctxOf(t)
		s := newStore(t, stores())
		flusher := consumers.Scope{Consumer: "flusher"}
		got, err := s.Commit(ctx, "pch-0", flusher, cp(10, 2), 3, parse)
		require.NoError(t, err)
		require.Equal(t, "10@2", got.Checkpoint)
		require.EqualValues(t, 3, got.Term)

		again, err := s.Commit(ctx, "pch-0", flusher, cp(10, 2), 3, parse)
		require.NoError(t, err)
		require.Equal(t, got.Revision, again.Revision, "the same checkpoint again writes nothing")

		_, err = s.Commit(ctx, "pch-0", flusher, cp(9, 2), 3, parse)
		isBoth(t, err, consumers.ErrBackwards)
		var refused *consumers.RefusedError
		require.True(t, stderrors.As(err, &refused))
		require.Equal(t, "10@2", refused.Stored.Checkpoint, "the refusal says what is stored")

		_, err = s.Commit(ctx, "pch-0", flusher, cp(20, 4), 2, parse)
		isBoth(t, err, consumers.ErrStaleTerm)

		got, err = s.Commit(ctx, "pch-0", flusher, cp(20, 4), 4, parse)
		require.NoError(t, err)
		require.EqualValues(t, 4, got.Term)

		// Another consumer, and one of a vchannel, keep their own.
		_, err = s.Commit(ctx, "pch-0", consumers.Scope{Consumer: "indexer"}, cp(5, 1), 4, parse)
		require.NoError(t, err)
		_, err = s.Commit(ctx, "pch-0", consumers.Scope{Consumer: "flusher", VChannel: "orders"}, cp(7, 1), 4, parse)
		require.NoError(t, err)
		// A channel whose name begins like this one's is another.
		_, err = s.Commit(ctx, "pch-00", flusher, cp(1, 1), 1, parse)
		require.NoError(t, err)

		ch, err := newStore(t, stores()).Load(ctx, "pch-0")
		require.NoError(t, err)
		require.Len(t, ch.Consumers, 3)
		require.Equal(t, flusher, ch.Consumers[0].Scope, "the channel's own consumers first, by name")
		require.Equal(t, consumers.Scope{Consumer: "indexer"}, ch.Consumers[1].Scope)
		require.Equal(t, consumers.Scope{Consumer: "flusher", VChannel: "orders"}, ch.Consumers[2].Scope)

		all, err := s.List(ctx)
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, "pch-0", all[0].Name)
		require.Equal(t, "pch-00", all[1].Name)
	})
}

// Bad input is refused before anything is written.
func TestCommitRefusesBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := ctxOf(t)
		s := newStore(t, stores())
		for _, c := range []struct {
			channel string
			sc      consumers.Scope
			cp      cursor.Checkpoint
		}{
			{"pch/0", consumers.Scope{Consumer: "a"}, cp(1, 1)},
			{"pch-0", consumers.Scope{Consumer: ""}, cp(1, 1)},
			{"pch-0", consumers.Scope{Consumer: "a/b"}, cp(1, 1)},
			{"pch-0", consumers.Scope{Consumer: "a", VChannel: "v/1"}, cp(1, 1)},
			{"pch-0", consumers.Scope{Consumer: "a"}, cursor.Checkpoint{}},
		} {
			_, err := s.Commit(ctx, c.channel, c.sc, c.cp, 1, parse)
			isBoth(t, err, consumers.ErrInvalid)
		}
		all, err := s.List(ctx)
		require.NoError(t, err)
		require.Empty(t, all)
	})
}

// The floor: a commit before it is refused; it only moves forward, only
// at its term or a later one; moves record resume points first, and a
// consumer that committed since the read makes Advance a conflict.
func TestAdvance(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := ctxOf(t)
		s := newStore(t, stores())
		idle := consumers.Scope{Consumer: "idx", VChannel: "users"}
		_, err := s.Commit(ctx, "pch-0", consumers.Scope{Consumer: "flusher"}, cp(50, 5), 2, parse)
		require.NoError(t, err)
		_, err = s.Commit(ctx, "pch-0", idle, cp(10, 1), 2, parse)
		require.NoError(t, err)

		read, err := s.Load(ctx, "pch-0")
		require.NoError(t, err)
		f, err := s.Advance(ctx, read, 2, cp(50, 5), []consumers.Move{{Scope: idle, Resume: cp(60, 6)}}, parse)
		require.NoError(t, err)
		require.Equal(t, "50@5", f.Checkpoint)

		after, err := s.Load(ctx, "pch-0")
		require.NoError(t, err)
		require.Equal(t, f, after.Floor)
		moved, ok := after.Find(idle)
		require.True(t, ok)
		require.Equal(t, "10@1", moved.Checkpoint, "its own checkpoint stays")
		require.Equal(t, "60@6", moved.ResumeAt(), "it resumes at the tail")

		// Before the floor: refused, whoever commits.
		_, err = s.Commit(ctx, "pch-0", consumers.Scope{Consumer: "late"}, cp(40, 4), 2, parse)
		isBoth(t, err, consumers.ErrTruncated)
		var refused *consumers.RefusedError
		require.True(t, stderrors.As(err, &refused))
		require.Equal(t, "50@5", refused.Floor.Checkpoint)
		// At the floor's position: kept.
		_, err = s.Commit(ctx, "pch-0", consumers.Scope{Consumer: "late"}, cp(49, 5), 2, parse)
		require.NoError(t, err)
		// A moved consumer's commit before its resume point keeps it.
		c, err := s.Commit(ctx, "pch-0", idle, cp(55, 5), 2, parse)
		require.NoError(t, err)
		require.Equal(t, "60@6", c.ResumeAt())
		c, err = s.Commit(ctx, "pch-0", idle, cp(70, 7), 2, parse)
		require.NoError(t, err)
		require.Equal(t, "70@7", c.ResumeAt(), "past its resume point, its own checkpoint again")

		// The floor never moves back, and a lower term cannot move it.
		read, err = s.Load(ctx, "pch-0")
		require.NoError(t, err)
		back, err := s.Advance(ctx, read, 2, cp(30, 3), nil, parse)
		require.NoError(t, err)
		require.Equal(t, "50@5", back.Checkpoint)
		_, err = s.Advance(ctx, read, 1, cp(80, 8), nil, parse)
		isBoth(t, err, consumers.ErrStaleTerm)

		// A commit between the read and the advance: the moves conflict.
		read, err = s.Load(ctx, "pch-0")
		require.NoError(t, err)
		_, err = s.Commit(ctx, "pch-0", idle, cp(75, 7), 2, parse)
		require.NoError(t, err)
		_, err = s.Advance(ctx, read, 3, cp(70, 7), []consumers.Move{{Scope: idle, Resume: cp(90, 9)}}, parse)
		isBoth(t, err, meta.ErrConflict)
		// A commit below a floor written by a later term: stale.
		read, err = s.Load(ctx, "pch-0")
		require.NoError(t, err)
		_, err = s.Advance(ctx, read, 3, cp(70, 7), nil, parse)
		require.NoError(t, err)
		_, err = s.Commit(ctx, "pch-0", consumers.Scope{Consumer: "flusher"}, cp(95, 9), 2, parse)
		isBoth(t, err, consumers.ErrStaleTerm)
	})
}

// A floor recorded while a commit races it: either the commit is stored
// before the floor (and a Load after the floor sees it), or it meets the
// floor and is refused — never stored unseen below it.
func TestCommitAndFloorNeverPass(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := ctxOf(t)
		a, b := newStore(t, stores()), newStore(t, stores())
		for round := range 20 {
			ch := fmt.Sprintf("race-%d", round)
			read, err := a.Load(ctx, ch)
			require.NoError(t, err)
			var wg sync.WaitGroup
			var commitErr, advanceErr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, commitErr = b.Commit(ctx, ch, consumers.Scope{Consumer: "new"}, cp(10, 1), 1, parse)
			}()
			go func() {
				defer wg.Done()
				_, advanceErr = a.Advance(ctx, read, 1, cp(20, 2), nil, parse)
			}()
			wg.Wait()
			require.NoError(t, advanceErr)
			after, err := a.Load(ctx, ch)
			require.NoError(t, err)
			if commitErr != nil {
				isBoth(t, commitErr, consumers.ErrTruncated)
				_, ok := after.Find(consumers.Scope{Consumer: "new"})
				require.False(t, ok)
				continue
			}
			_, ok := after.Find(consumers.Scope{Consumer: "new"})
			require.True(t, ok, "a stored commit is seen by the load after the floor")
		}
	})
}

// Concurrent commits of one consumer from two processes end at the
// highest.
func TestConcurrentCommits(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := ctxOf(t)
		ss := []*consumers.Store{newStore(t, stores()), newStore(t, stores())}
		var wg sync.WaitGroup
		for i, s := range ss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 20 {
					tt := uint64(k*2 + i + 1)
					_, err := s.Commit(ctx, "pch-0", consumers.Scope{Consumer: "c"}, cp(tt, int64(tt)), 1, parse)
					if err != nil && !stderrors.Is(err, consumers.ErrBackwards) {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		ch, err := ss[0].Load(ctx, "pch-0")
		require.NoError(t, err)
		require.Equal(t, "40@40", ch.Consumers[0].Checkpoint)
	})
}

// Drop removes a consumer (it no longer holds the log); Delete removes
// the channel's records; a corrupt record is meta.ErrCorrupt.
func TestDropDeleteCorrupt(t *testing.T) {
	eachStore(t, func(t *testing.T, stores func() meta.Store) {
		ctx := ctxOf(t)
		kv := stores()
		s := newStore(t, kv)
		sc := consumers.Scope{Consumer: "c", VChannel: "v"}
		_, err := s.Commit(ctx, "pch-0", sc, cp(1, 1), 1, parse)
		require.NoError(t, err)
		require.NoError(t, s.Drop(ctx, "pch-0", sc))
		isBoth(t, s.Drop(ctx, "pch-0", sc), consumers.ErrNotFound)

		_, err = s.Commit(ctx, "pch-0", sc, cp(1, 1), 1, parse)
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, "pch-0"))
		ch, err := s.Load(ctx, "pch-0")
		require.NoError(t, err)
		require.Empty(t, ch.Consumers)

		_, err = kv.Put(ctx, consumers.DefaultPrefix+"pch-1/c/x", []byte(`{"v":9}`), meta.Any)
		require.NoError(t, err)
		_, err = s.Load(ctx, "pch-1")
		isBoth(t, err, meta.ErrCorrupt)
		_, err = kv.Put(ctx, consumers.DefaultPrefix+"pch-2/floor", []byte(`not json`), meta.Any)
		require.NoError(t, err)
		_, err = s.Commit(ctx, "pch-2", sc, cp(1, 1), 1, parse)
		isBoth(t, err, meta.ErrCorrupt)
	})
}
