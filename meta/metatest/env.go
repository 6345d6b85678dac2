package metatest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
)

// waitTimeout is the watchdog on every wait of a part: every store call
// gets it as its context's deadline, and fails the part if it has not
// returned shortly after. Generous, because a remote store under -race on
// two cores is slow, but finite.
const waitTimeout = 30 * time.Second

// env is one part's store and its bounded calls.
type env struct {
	t *testing.T
	f Factory
	s meta.Store
}

func newEnv(t *testing.T, f Factory) *env {
	e := &env{t: t, f: f}
	e.s = e.open(func() meta.Store { return f.New(t) }, "New")
	return e
}

// open gets a store from fn (a Factory method), bounded by the wait
// timeout, and closes it at the end of the part. fn runs on a goroutine of
// its own; if it fails the test (FailNow ends that goroutine), the part
// stops here.
func (e *env) open(fn func() meta.Store, what string) meta.Store {
	e.t.Helper()
	var s meta.Store
	done := make(chan struct{})
	go func() {
		defer close(done)
		s = fn()
	}()
	e.wait(done, "Factory."+what)
	require.NotNil(e.t, s, "Factory.%s failed or returned nil", what)
	e.closeLater(s)
	return s
}

// within runs fn with a context of the wait timeout and fails the part if
// fn has not returned shortly after that: a store that ignores its context
// fails in seconds instead of hanging the run.
func within[T any](e *env, what string, fn func(ctx context.Context) (T, error)) (T, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		done <- result{v, err}
	}()
	timer := time.NewTimer(waitTimeout + time.Second)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		require.FailNowf(e.t, "watchdog", "%s did not return within %s", what, waitTimeout)
	}
	var zero T
	return zero, nil
}

// closeLater closes s when the part ends, reporting (not hanging on) a
// Close that does not return.
func (e *env) closeLater(s meta.Store) {
	e.t.Cleanup(func() {
		if err := e.closeStore(s); err != nil {
			e.t.Errorf("Close: %v", err)
		}
	})
}

// closeStore closes s, bounded by the wait timeout.
func (e *env) closeStore(s meta.Store) error {
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		e.t.Errorf("watchdog: Close did not return within %s", waitTimeout)
		return nil
	}
}

// wait waits for done, failing the part after the wait timeout.
func (e *env) wait(done <-chan struct{}, what string) {
	e.t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		require.FailNowf(e.t, "watchdog", "%s not done within %s", what, waitTimeout)
	}
}

// The store's methods, each bounded by the wait timeout.

func (e *env) get(key string) (meta.KV, error) {
	e.t.Helper()
	return within(e, "Get", func(ctx context.Context) (meta.KV, error) { return e.s.Get(ctx, key) })
}

type listResult struct {
	kvs []meta.KV
	rev int64
}

func (e *env) list(prefix string) ([]meta.KV, int64, error) {
	e.t.Helper()
	r, err := within(e, "List", func(ctx context.Context) (listResult, error) {
		kvs, rev, err := e.s.List(ctx, prefix)
		return listResult{kvs, rev}, err
	})
	return r.kvs, r.rev, err
}

func (e *env) put(key string, value []byte, expect int64) (int64, error) {
	e.t.Helper()
	return within(e, "Put", func(ctx context.Context) (int64, error) { return e.s.Put(ctx, key, value, expect) })
}

func (e *env) del(key string, expect int64) error {
	e.t.Helper()
	_, err := within(e, "Delete", func(ctx context.Context) (struct{}, error) { return struct{}{}, e.s.Delete(ctx, key, expect) })
	return err
}

func (e *env) commit(txn meta.Txn) (int64, error) {
	e.t.Helper()
	return within(e, "Commit", func(ctx context.Context) (int64, error) { return e.s.Commit(ctx, txn) })
}

// Variants that fail the part on an error.

func (e *env) mustGet(key string) meta.KV {
	e.t.Helper()
	kv, err := e.get(key)
	require.NoError(e.t, err, "Get %q", key)
	require.Equal(e.t, key, kv.Key, "Get %q: key", key)
	return kv
}

func (e *env) mustList(prefix string) ([]meta.KV, int64) {
	e.t.Helper()
	kvs, rev, err := e.list(prefix)
	require.NoError(e.t, err, "List %q", prefix)
	return kvs, rev
}

func (e *env) mustPut(key string, value []byte, expect int64) int64 {
	e.t.Helper()
	rev, err := e.put(key, value, expect)
	require.NoError(e.t, err, "Put %q expecting %d", key, expect)
	require.Positive(e.t, rev, "Put %q: revision", key)
	return rev
}

func (e *env) mustDelete(key string, expect int64) {
	e.t.Helper()
	require.NoError(e.t, e.del(key, expect), "Delete %q expecting %d", key, expect)
}

func (e *env) mustCommit(txn meta.Txn) int64 {
	e.t.Helper()
	rev, err := e.commit(txn)
	require.NoError(e.t, err, "Commit")
	require.Positive(e.t, rev, "Commit: revision")
	return rev
}

// notFound checks that key does not exist.
func (e *env) notFound(key string) {
	e.t.Helper()
	_, err := e.get(key)
	require.ErrorIs(e.t, err, meta.ErrNotFound, "Get %q", key)
}

// hasValue checks key's value and revision.
func (e *env) hasValue(key string, value []byte, rev int64) {
	e.t.Helper()
	kv := e.mustGet(key)
	require.Equal(e.t, string(value), string(kv.Value), "value of %q", key)
	require.Equal(e.t, rev, kv.Revision, "revision of %q", key)
}

// entry is a KV as state records it: large values by their digest, so
// that a failed comparison prints a readable diff.
type entry struct {
	Key      string
	Value    string
	Revision int64
}

// state is everything in the store (keys, values, revisions), to check
// that a failed call changed nothing. The store revision is left out: on
// a shared cluster other writers move it.
func (e *env) state() []entry {
	e.t.Helper()
	kvs, _ := e.mustList("")
	out := make([]entry, len(kvs))
	for i, kv := range kvs {
		v := strconv.Quote(string(kv.Value))
		if len(kv.Value) > 64 {
			v = fmt.Sprintf("%d bytes, sha256 %x", len(kv.Value), sha256.Sum256(kv.Value))
		}
		out[i] = entry{Key: kv.Key, Value: v, Revision: kv.Revision}
	}
	return out
}

// unchanged checks that the store still holds before.
func (e *env) unchanged(before []entry, after string) {
	e.t.Helper()
	require.Equal(e.t, before, e.state(), "the store changed after %s", after)
}

// sortedKeys returns the keys of kvs in order.
func sortedKeys(kvs []meta.KV) []string {
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.Key
	}
	sort.Strings(keys)
	return keys
}
