package metatest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/meta/metatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// brokenEnv selects the deliberately broken store the child run uses.
const brokenEnv = "METATEST_BROKEN"

// breakages lists each deliberately broken store (a wrapper of boltstore)
// and the parts of the suite that must fail it. Each models a bug a real
// store could have.
var breakages = []struct {
	broken   string
	mustFail []string
}{
	{"none", nil}, // the wrapper unbroken: the whole suite passes
	{"put-ignores-expect", []string{"PutExpect", "ConcurrentCAS"}},
	{"delete-ignores-expect", []string{"DeleteExpect"}},
	{"delete-missing-conflicts", []string{"DeleteExpect"}},
	{"conflict-untyped", []string{"PutExpect", "ConcurrentCAS"}},
	{"get-stale-revision", []string{"CRUD", "Revisions"}},
	{"keeps-caller-slice", []string{"Values"}},
	{"list-leaks-prefix", []string{"ListPrefix"}},
	{"list-unsorted", []string{"ListPrefix"}},
	{"list-stale-revision", []string{"ListRevision"}},
	{"list-torn", []string{"ListSnapshot"}},
	{"commit-puts-first", []string{"Commit", "CommitConflict"}},
	{"commit-check-then-act", []string{"ConcurrentCommit"}},
	{"commit-unnamed-conflict", []string{"CommitConflict"}},
	{"commit-limit-off-by-one", []string{"Invalid", "Commit"}},
	{"close-is-noop", []string{"Lifecycle", "CloseInFlight"}},
	{"close-twice-fails", []string{"Lifecycle"}},
	{"ignore-context", []string{"Context"}},
	{"context-checked-after", []string{"Context"}},
	{"restart-fresh", []string{"Restart"}},
}

// TestSuiteCatchesBrokenStores runs the suite, in a child process, against
// stores broken on purpose, and checks that it fails them in the parts that
// should notice, within a bounded time; and that the unbroken wrapper
// passes the whole suite, so the failures come from the breakage.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite once per broken store, in child processes")
	}
	for _, c := range breakages {
		t.Run(c.broken, func(t *testing.T) {
			t.Parallel()
			run := "^TestBrokenStoreChild$"
			if c.mustFail != nil {
				run += "/^(" + strings.Join(c.mustFail, "|") + ")$"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.broken,
				// Under -race, a process sleeps 1s at exit unless told not to.
				"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			out, err := cmd.CombinedOutput()
			require.NoErrorf(t, ctx.Err(), "the suite hung on a store that is %s instead of failing it:\n%s", c.broken, out)
			if c.mustFail == nil {
				require.NoError(t, err, "the unbroken wrapper fails the suite:\n%s", out)
				require.NotContains(t, string(out), "--- SKIP", "the unbroken wrapper skips parts:\n%s", out)
				return
			}
			require.Error(t, err, "the suite passed a store that is %s:\n%s", c.broken, out)
			for _, part := range c.mustFail {
				re := regexp.MustCompile(`--- FAIL: TestBrokenStoreChild/` + part + ` `)
				require.Truef(t, re.Match(out), "part %s did not fail for %s:\n%s", part, c.broken, out)
			}
		})
	}
}

// TestBrokenStoreChild is the child of TestSuiteCatchesBrokenStores.
func TestBrokenStoreChild(t *testing.T) {
	broken := os.Getenv(brokenEnv)
	if broken == "" {
		t.Skip("child process of TestSuiteCatchesBrokenStores")
	}
	metatest.Run(t, brokenFactory{broken: broken})
}

type brokenFactory struct{ broken string }

func (f brokenFactory) open(t *testing.T, path string) meta.Store {
	s, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return &brokenStore{Store: s, broken: f.broken, cache: map[string][]byte{}}
}

func (f brokenFactory) New(t *testing.T) meta.Store {
	return f.open(t, filepath.Join(t.TempDir(), "meta.db"))
}

func (f brokenFactory) Restart(t *testing.T, s meta.Store) meta.Store {
	inner := s.(*brokenStore).Store
	require.NoError(t, inner.Close())
	path := inner.Path()
	if f.broken == "restart-fresh" {
		path = filepath.Join(t.TempDir(), "fresh.db")
	}
	return f.open(t, path)
}

// brokenStore forwards to a boltstore, breaking it on purpose.
type brokenStore struct {
	*boltstore.Store
	broken string

	mu     sync.Mutex
	cache  map[string][]byte // keeps-caller-slice
	closes int               // close-twice-fails
}

func (s *brokenStore) Get(ctx context.Context, key string) (meta.KV, error) {
	if s.broken == "ignore-context" {
		ctx = context.Background()
	}
	kv, err := s.Store.Get(ctx, key)
	if err != nil {
		return kv, err
	}
	switch s.broken {
	case "get-stale-revision":
		kv.Revision--
	case "keeps-caller-slice":
		s.mu.Lock()
		if v, ok := s.cache[key]; ok {
			kv.Value = v
		}
		s.mu.Unlock()
	}
	return kv, nil
}

func (s *brokenStore) List(ctx context.Context, prefix string) ([]meta.KV, int64, error) {
	switch s.broken {
	case "ignore-context":
		ctx = context.Background()
	case "list-leaks-prefix":
		if prefix != "" {
			prefix = prefix[:len(prefix)-1] // the last byte "rounded down"
		}
	}
	kvs, rev, err := s.Store.List(ctx, prefix)
	if err != nil {
		return kvs, rev, err
	}
	switch s.broken {
	case "list-unsorted":
		slices.Reverse(kvs)
	case "list-stale-revision":
		rev--
	case "list-torn":
		// Reads the keys after the first again, one at a time: no
		// snapshot. It does so once the first key has changed, so that a
		// write always lands between the reads however the goroutines are
		// scheduled: ListSnapshot has a writer committing while it lists
		// (and a List that finds no write coming ends with its context,
		// failing too).
		for len(kvs) > 1 {
			kv, err := s.Store.Get(ctx, kvs[0].Key)
			if err != nil {
				return nil, 0, err
			}
			if kv.Revision != kvs[0].Revision {
				break
			}
			select {
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			case <-time.After(time.Millisecond): // polls the first key
			}
		}
		for i := 1; i < len(kvs); i++ {
			kv, err := s.Store.Get(ctx, kvs[i].Key)
			if err != nil {
				return nil, 0, err
			}
			kvs[i] = kv
		}
	}
	return kvs, rev, nil
}

func (s *brokenStore) Put(ctx context.Context, key string, value []byte, expect int64) (int64, error) {
	switch s.broken {
	case "ignore-context":
		ctx = context.Background()
	case "put-ignores-expect":
		if meta.ValidateExpect(expect) == nil {
			expect = meta.Any
		}
	case "context-checked-after":
		rev, err := s.Store.Put(context.Background(), key, value, expect)
		if cerr := ctx.Err(); cerr != nil {
			return 0, cerr
		}
		return rev, err
	}
	rev, err := s.Store.Put(ctx, key, value, expect)
	switch {
	case s.broken == "conflict-untyped" && errors.Is(err, meta.ErrConflict):
		return 0, errors.Newf("write refused: %v", err)
	case s.broken == "keeps-caller-slice" && err == nil:
		s.mu.Lock()
		s.cache[key] = value
		s.mu.Unlock()
	}
	return rev, err
}

func (s *brokenStore) Delete(ctx context.Context, key string, expect int64) error {
	switch s.broken {
	case "ignore-context":
		ctx = context.Background()
	case "delete-ignores-expect":
		if meta.ValidateExpect(expect) == nil {
			expect = meta.Any
		}
	case "delete-missing-conflicts":
		if _, err := s.Store.Get(ctx, key); errors.Is(err, meta.ErrNotFound) {
			return errors.Wrapf(meta.ErrConflict, "delete %q: not found", key)
		}
	}
	return s.Store.Delete(ctx, key, expect)
}

func (s *brokenStore) Commit(ctx context.Context, txn meta.Txn) (int64, error) {
	switch s.broken {
	case "ignore-context":
		ctx = context.Background()
	case "commit-limit-off-by-one":
		if len(txn.Puts)+len(txn.Deletes) >= meta.MaxCommitOps {
			return 0, errors.Wrap(meta.ErrInvalid, "too many operations")
		}
	case "commit-puts-first", "commit-check-then-act":
		if err := txn.Validate(); err != nil {
			return 0, err
		}
		if s.broken == "commit-puts-first" {
			if err := s.applyPuts(ctx, txn); err != nil {
				return 0, err
			}
		}
		for _, c := range txn.Conds {
			kv, err := s.Store.Get(ctx, c.Key)
			if err != nil && !errors.Is(err, meta.ErrNotFound) {
				return 0, err
			}
			if kv.Revision != c.Revision {
				return 0, errors.Wrapf(meta.ErrConflict, "condition on %q", c.Key)
			}
		}
		if s.broken == "commit-check-then-act" {
			if err := s.applyPuts(ctx, txn); err != nil {
				return 0, err
			}
		}
		for _, d := range txn.Deletes {
			if err := s.Store.Delete(ctx, d, meta.Any); err != nil {
				return 0, err
			}
		}
		_, rev, err := s.Store.List(ctx, "\xff\xff\xff\xff") // the store revision
		return rev, err
	}
	rev, err := s.Store.Commit(ctx, txn)
	if s.broken == "commit-unnamed-conflict" && errors.Is(err, meta.ErrConflict) {
		return 0, errors.Wrap(meta.ErrConflict, "a condition failed")
	}
	return rev, err
}

// applyPuts writes txn's puts one by one.
func (s *brokenStore) applyPuts(ctx context.Context, txn meta.Txn) error {
	for _, p := range txn.Puts {
		if _, err := s.Store.Put(ctx, p.Key, p.Value, meta.Any); err != nil {
			return err
		}
	}
	return nil
}

func (s *brokenStore) Close() error {
	s.mu.Lock()
	s.closes++
	n := s.closes
	s.mu.Unlock()
	switch {
	case s.broken == "close-is-noop":
		return nil
	case s.broken == "close-twice-fails" && n > 1:
		return errors.New("already closed")
	}
	return s.Store.Close()
}
