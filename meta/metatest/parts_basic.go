package metatest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/meta"
)

// testLifecycle: Close is idempotent, and every call after it is
// ErrClosed.
func testLifecycle(e *env) {
	t := e.t
	rev := e.mustPut("k", []byte("v"), meta.Absent)
	require.NoError(t, e.closeStore(e.s), "first Close")
	require.NoError(t, e.closeStore(e.s), "second Close")

	_, err := e.get("k")
	require.ErrorIs(t, err, meta.ErrClosed, "Get after Close")
	_, _, err = e.list("")
	require.ErrorIs(t, err, meta.ErrClosed, "List after Close")
	_, err = e.put("k", []byte("w"), rev)
	require.ErrorIs(t, err, meta.ErrClosed, "Put after Close")
	_, err = e.put("new", []byte("w"), meta.Any)
	require.ErrorIs(t, err, meta.ErrClosed, "Put Any after Close")
	require.ErrorIs(t, e.del("k", meta.Any), meta.ErrClosed, "Delete after Close")
	_, err = e.commit(meta.Txn{Puts: []meta.KV{{Key: "k2", Value: []byte("x")}}})
	require.ErrorIs(t, err, meta.ErrClosed, "Commit after Close")
	require.NoError(t, e.closeStore(e.s), "third Close")
}

// testCloseInFlight: calls racing with Close succeed or fail with
// ErrClosed, nothing else; every call that starts after Close returned
// fails with ErrClosed; all of them end.
func testCloseInFlight(e *env) {
	t := e.t
	const workers = 4
	var (
		wg       sync.WaitGroup
		started  sync.WaitGroup
		closed   atomic.Bool // set once Close has returned
		mu       sync.Mutex
		problems []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	started.Add(workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			key := string(rune('a' + w))
			for i := 0; ; i++ {
				after := closed.Load()
				var (
					op  string
					err error
				)
				switch i % 3 {
				case 0:
					op = "Put"
					_, err = e.s.Put(ctx, key, []byte("v"), meta.Any)
				case 1:
					op = "Get"
					_, err = e.s.Get(ctx, key)
				default:
					op = "List"
					_, _, err = e.s.List(ctx, "")
				}
				if i == 0 {
					started.Done()
				}
				switch {
				case err == nil && after:
					report("%s started after Close returned succeeded", op)
					return
				case err == nil:
				case errors.Is(err, meta.ErrClosed):
					return
				default:
					report("%s racing with Close: %v", op, err)
					return
				}
			}
		}()
	}
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	e.wait(allStarted, "the first call of every worker")
	require.NoError(t, e.closeStore(e.s), "Close")
	closed.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	e.wait(done, "calls racing with Close")
	require.Empty(t, problems)
}

// testCRUD: a key's life: absent, created, updated, deleted, created again.
func testCRUD(e *env) {
	t := e.t
	e.notFound("k")
	r1 := e.mustPut("k", []byte("one"), meta.Absent)
	e.hasValue("k", []byte("one"), r1)
	r2 := e.mustPut("k", []byte("two"), r1)
	require.Greater(t, r2, r1)
	e.hasValue("k", []byte("two"), r2)
	e.mustDelete("k", r2)
	e.notFound("k")
	r3 := e.mustPut("k", []byte("three"), meta.Absent)
	require.Greater(t, r3, r2)
	e.hasValue("k", []byte("three"), r3)
	kvs, _ := e.mustList("")
	require.Equal(t, []meta.KV{{Key: "k", Value: []byte("three"), Revision: r3}}, kvs)
}

// testValues: values round-trip byte for byte (binary, empty, 1 MiB) under
// binary and longest keys, and neither the caller's slices nor the
// returned ones alias the store.
func testValues(e *env) {
	t := e.t
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	longKey := "long/" + strings.Repeat("k", meta.MaxKeyLen-len("long/"))
	cases := []struct {
		key   string
		value []byte
	}{
		{"binary", all},
		{"empty-nil", nil},
		{"empty", []byte{}},
		{"big", big},
		{"key/\x00\x01\xfe\xff", []byte("binary key")},
		{"\xff", []byte("0xff key")},
		{longKey, []byte("longest key")},
		{"utf8/κλειδί", []byte("ü")},
	}
	revs := map[string]int64{}
	for _, c := range cases {
		revs[c.key] = e.mustPut(c.key, c.value, meta.Absent)
	}
	for _, c := range cases {
		kv := e.mustGet(c.key)
		require.Truef(t, bytes.Equal(c.value, kv.Value), "value of %q: %d bytes back, %d put", c.key, len(kv.Value), len(c.value))
		require.Equal(t, revs[c.key], kv.Revision, "revision of %q", c.key)
	}
	kvs, _ := e.mustList("")
	require.Len(t, kvs, len(cases))
	for _, kv := range kvs {
		var want []byte
		for _, c := range cases {
			if c.key == kv.Key {
				want = c.value
			}
		}
		require.Truef(t, bytes.Equal(want, kv.Value), "List: value of %q", kv.Key)
		require.Equal(t, revs[kv.Key], kv.Revision, "List: revision of %q", kv.Key)
	}

	// The store keeps its own copies.
	v := []byte("original")
	r := e.mustPut("alias", v, meta.Absent)
	copy(v, "CHANGED!")
	e.hasValue("alias", []byte("original"), r)
	got := e.mustGet("alias")
	copy(got.Value, "CHANGED!")
	e.hasValue("alias", []byte("original"), r)
	listed, _ := e.mustList("alias")
	require.Len(t, listed, 1)
	copy(listed[0].Value, "CHANGED!")
	e.hasValue("alias", []byte("original"), r)
	cv := []byte("original")
	cr := e.mustCommit(meta.Txn{Puts: []meta.KV{{Key: "alias-commit", Value: cv}}})
	copy(cv, "CHANGED!")
	e.hasValue("alias-commit", []byte("original"), cr)
}

// testPutExpect: Put with Absent, a revision and Any; a conflict changes
// nothing.
func testPutExpect(e *env) {
	t := e.t
	r1 := e.mustPut("k", []byte("v1"), meta.Absent)
	before := e.state()
	_, err := e.put("k", []byte("x"), meta.Absent)
	require.ErrorIs(t, err, meta.ErrConflict, "Put Absent of an existing key")
	e.unchanged(before, "a Put expecting Absent of an existing key")

	r2 := e.mustPut("k", []byte("v2"), r1)
	before = e.state()
	_, err = e.put("k", []byte("x"), r1)
	require.ErrorIs(t, err, meta.ErrConflict, "Put with a stale revision")
	e.unchanged(before, "a Put with a stale revision")
	_, err = e.put("k", []byte("x"), r2+1_000_000)
	require.ErrorIs(t, err, meta.ErrConflict, "Put with a future revision")
	e.unchanged(before, "a Put with a future revision")
	_, err = e.put("missing", []byte("x"), r2)
	require.ErrorIs(t, err, meta.ErrConflict, "Put expecting a revision of a missing key")
	e.unchanged(before, "a Put expecting a revision of a missing key")
	e.notFound("missing")

	r3 := e.mustPut("k", []byte("v3"), meta.Any)
	require.Greater(t, r3, r2)
	e.hasValue("k", []byte("v3"), r3)
	r4 := e.mustPut("other", []byte("o"), meta.Any)
	require.Greater(t, r4, r3)
	e.hasValue("other", []byte("o"), r4)
	e.hasValue("k", []byte("v3"), r3)
}

// testDeleteExpect: Delete with Absent, a revision and Any; a conflict
// changes nothing; deleting a missing key with Absent or Any succeeds.
func testDeleteExpect(e *env) {
	t := e.t
	r1 := e.mustPut("k", []byte("v1"), meta.Absent)
	r2 := e.mustPut("k", []byte("v2"), r1)
	e.mustPut("keep", []byte("keep"), meta.Absent)
	before := e.state()
	require.ErrorIs(t, e.del("k", r1), meta.ErrConflict, "Delete with a stale revision")
	e.unchanged(before, "a Delete with a stale revision")
	require.ErrorIs(t, e.del("k", meta.Absent), meta.ErrConflict, "Delete expecting Absent of an existing key")
	e.unchanged(before, "a Delete expecting Absent of an existing key")
	require.ErrorIs(t, e.del("missing", r2), meta.ErrConflict, "Delete expecting a revision of a missing key")
	e.unchanged(before, "a Delete expecting a revision of a missing key")
	require.NoError(t, e.del("missing", meta.Absent), "Delete expecting Absent of a missing key")
	e.unchanged(before, "a Delete expecting Absent of a missing key")
	require.NoError(t, e.del("missing", meta.Any), "Delete Any of a missing key")
	e.unchanged(before, "a Delete Any of a missing key")

	e.mustDelete("k", r2)
	e.notFound("k")
	r3 := e.mustPut("k", []byte("v3"), meta.Absent)
	require.Greater(t, r3, r2)
	e.mustDelete("k", meta.Any)
	e.notFound("k")
	kvs, _ := e.mustList("")
	require.Equal(t, []string{"keep"}, sortedKeys(kvs))
}

// testRevisions: every write gets a revision above every earlier one, the
// one Get and List then report; a key created again does not get an old
// revision back.
func testRevisions(e *env) {
	t := e.t
	var last int64
	next := func(rev int64, what string) {
		t.Helper()
		require.Greaterf(t, rev, last, "%s: revision %d not above the previous write's %d", what, rev, last)
		last = rev
	}
	ra := e.mustPut("a", []byte("1"), meta.Absent)
	next(ra, "Put a")
	rb := e.mustPut("b", []byte("1"), meta.Absent)
	next(rb, "Put b")
	ra2 := e.mustPut("a", []byte("2"), ra)
	next(ra2, "update a")
	e.hasValue("a", []byte("2"), ra2)
	e.hasValue("b", []byte("1"), rb)
	e.mustDelete("b", rb)
	rc := e.mustCommit(meta.Txn{Puts: []meta.KV{{Key: "c", Value: []byte("1")}, {Key: "d", Value: []byte("1")}}, Deletes: []string{"a"}})
	next(rc, "Commit")
	e.hasValue("c", []byte("1"), rc)
	e.hasValue("d", []byte("1"), rc)
	rb2 := e.mustPut("b", []byte("again"), meta.Absent)
	next(rb2, "Put b again")
	rany := e.mustPut("c", []byte("2"), meta.Any)
	next(rany, "Put Any")
	for i := range 20 {
		next(e.mustPut("many", []byte{byte(i)}, meta.Any), "Put many")
	}
	kvs, lrev := e.mustList("")
	require.GreaterOrEqual(t, lrev, last, "List's revision is below the last write's")
	want := map[string]int64{"b": rb2, "c": rany, "d": rc, "many": last}
	require.Len(t, kvs, len(want))
	for _, kv := range kvs {
		require.Equal(t, want[kv.Key], kv.Revision, "List: revision of %q", kv.Key)
	}
}

// testInvalid: bad input is ErrInvalid and changes nothing; the limits
// themselves are accepted.
func testInvalid(e *env) {
	t := e.t
	long := strings.Repeat("k", meta.MaxKeyLen+1)
	e.mustPut("k", []byte("v"), meta.Absent)
	before := e.state()

	_, err := e.get("")
	require.ErrorIs(t, err, meta.ErrInvalid, "Get of the empty key")
	_, err = e.get(long)
	require.ErrorIs(t, err, meta.ErrInvalid, "Get of a key longer than MaxKeyLen")
	_, err = e.put("", []byte("v"), meta.Any)
	require.ErrorIs(t, err, meta.ErrInvalid, "Put of the empty key")
	_, err = e.put(long, []byte("v"), meta.Any)
	require.ErrorIs(t, err, meta.ErrInvalid, "Put of a key longer than MaxKeyLen")
	_, err = e.put("k", []byte("v"), -2)
	require.ErrorIs(t, err, meta.ErrInvalid, "Put expecting revision -2")
	require.ErrorIs(t, e.del("", meta.Any), meta.ErrInvalid, "Delete of the empty key")
	require.ErrorIs(t, e.del(long, meta.Any), meta.ErrInvalid, "Delete of a key longer than MaxKeyLen")
	require.ErrorIs(t, e.del("k", -2), meta.ErrInvalid, "Delete expecting revision -2")

	puts := func(n int) []meta.KV {
		kvs := make([]meta.KV, n)
		for i := range kvs {
			kvs[i] = meta.KV{Key: "many/" + string(rune('A'+i%26)) + strings.Repeat("x", i/26), Value: []byte{byte(i)}}
		}
		return kvs
	}
	conds := func(n int) []meta.Cond {
		cs := make([]meta.Cond, n)
		for i := range cs {
			cs[i] = meta.Cond{Key: "cond/" + string(rune('A'+i%26)) + strings.Repeat("x", i/26), Revision: meta.Absent}
		}
		return cs
	}
	for _, c := range []struct {
		what string
		txn  meta.Txn
	}{
		{"an empty Commit", meta.Txn{}},
		{"a Commit of conditions only", meta.Txn{Conds: []meta.Cond{{Key: "k", Revision: meta.Absent}}}},
		{"a Commit of MaxCommitOps+1 puts", meta.Txn{Puts: puts(meta.MaxCommitOps + 1)}},
		{"a Commit of MaxCommitOps+1 conditions", meta.Txn{Conds: conds(meta.MaxCommitOps + 1), Puts: puts(1)}},
		{"a Commit putting and deleting one key", meta.Txn{Puts: []meta.KV{{Key: "x"}}, Deletes: []string{"x"}}},
		{"a Commit putting one key twice", meta.Txn{Puts: []meta.KV{{Key: "x"}, {Key: "x"}}}},
		{"a Commit putting the empty key", meta.Txn{Puts: []meta.KV{{Key: ""}}}},
		{"a Commit deleting a key longer than MaxKeyLen", meta.Txn{Deletes: []string{long}}},
		{"a Commit with a condition expecting Any", meta.Txn{Conds: []meta.Cond{{Key: "k", Revision: meta.Any}}, Puts: puts(1)}},
		{"a Commit with a condition on the empty key", meta.Txn{Conds: []meta.Cond{{Key: "", Revision: meta.Absent}}, Puts: puts(1)}},
	} {
		_, err := e.commit(c.txn)
		require.ErrorIs(t, err, meta.ErrInvalid, "%s", c.what)
	}
	e.unchanged(before, "invalid calls")

	// The limits are fine.
	e.mustCommit(meta.Txn{Conds: conds(meta.MaxCommitOps), Puts: puts(meta.MaxCommitOps)})
	kvs, _ := e.mustList("many/")
	require.Len(t, kvs, meta.MaxCommitOps)
}

// testContext: a call whose context is already cancelled or past its
// deadline returns the context's error and changes nothing.
func testContext(e *env) {
	t := e.t
	rev := e.mustPut("k", []byte("v"), meta.Absent)
	before := e.state()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		calls := map[string]func() error{
			"Get": func() error { _, err := e.s.Get(c.ctx, "k"); return err },
			"List": func() error {
				_, _, err := e.s.List(c.ctx, "")
				return err
			},
			"Put":           func() error { _, err := e.s.Put(c.ctx, "k", []byte("x"), rev); return err },
			"Put Any":       func() error { _, err := e.s.Put(c.ctx, "new", []byte("x"), meta.Any); return err },
			"Delete":        func() error { return e.s.Delete(c.ctx, "k", meta.Any) },
			"Commit":        func() error { _, err := e.s.Commit(c.ctx, meta.Txn{Puts: []meta.KV{{Key: "new"}}}); return err },
			"Commit delete": func() error { _, err := e.s.Commit(c.ctx, meta.Txn{Deletes: []string{"k"}}); return err },
		}
		for name, call := range calls {
			_, err := within(e, name, func(context.Context) (struct{}, error) { return struct{}{}, call() })
			require.ErrorIs(t, err, c.want, "%s with a context that is %v", name, c.want)
		}
	}
	e.unchanged(before, "calls with a done context")
}

// testRestart: after a restart the store holds what it held, and new
// writes get revisions above everything before.
func testRestart(e *env) {
	t := e.t
	r, ok := e.f.(Restarter)
	if !ok {
		t.Skip("the Factory does not implement metatest.Restarter")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	e.mustPut("big", big, meta.Absent)
	e.mustPut("empty", nil, meta.Absent)
	e.mustPut("bin\xff", []byte{0, 1, 2, 0xff}, meta.Absent)
	gone := e.mustPut("gone", []byte("x"), meta.Absent)
	re := e.mustPut("updated", []byte("1"), meta.Absent)
	e.mustPut("updated", []byte("2"), re)
	e.mustCommit(meta.Txn{Puts: []meta.KV{{Key: "c/1", Value: []byte("1")}, {Key: "c/2", Value: []byte("2")}}})
	// The last write is a delete: the store revision must survive it.
	e.mustDelete("gone", gone)
	before := e.state()
	_, lrev := e.mustList("")

	for i := range 2 {
		old := e.s
		e.s = e.open(func() meta.Store { return r.Restart(t, old) }, "Restart")
		require.Equal(t, before, e.state(), "the store after restart %d", i+1)
		_, lrev2 := e.mustList("")
		require.GreaterOrEqual(t, lrev2, lrev, "List's revision went back after restart %d", i+1)
	}
	e.notFound("gone")
	rev := e.mustPut("gone", []byte("again"), meta.Absent)
	require.Greater(t, rev, lrev, "a write after restart got a revision at or below the store's before it")
	e.hasValue("gone", []byte("again"), rev)
}
