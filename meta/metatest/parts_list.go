package metatest

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
)

// listKeys are the keys of ListPrefix: prefixes that are keys themselves,
// keys sharing leading bytes, 0x00 and 0xff bytes.
var listKeys = []string{
	"a", "a\x00", "a/", "a/b", "a/b/c", "a/c", "a0", "a\xff", "a\xff\xff", "ab",
	"b", "\xff", "\xff\x00", "\xff\xff",
}

// testListPrefix: List returns exactly the keys with the prefix, in byte
// order, with their values and revisions.
func testListPrefix(e *env) {
	t := e.t
	revs := map[string]int64{}
	for i, k := range listKeys {
		// Put in an order unlike the byte order.
		k = listKeys[(i*5)%len(listKeys)]
		revs[k] = e.mustPut(k, []byte("value of "+k), meta.Absent)
	}
	require.Len(t, revs, len(listKeys))
	sorted := append([]string(nil), listKeys...)
	sort.Strings(sorted)
	withPrefix := func(p string) []string {
		var out []string
		for _, k := range sorted {
			if strings.HasPrefix(k, p) {
				out = append(out, k)
			}
		}
		return out
	}
	// A few spelled out, so that the expectations above are checked too.
	require.Equal(t, []string{"a/", "a/b", "a/b/c", "a/c"}, withPrefix("a/"))
	require.Equal(t, []string{"\xff", "\xff\x00", "\xff\xff"}, withPrefix("\xff"))

	for _, p := range []string{
		"", "a", "a/", "a/b", "a/b/", "a/b/c", "a/b/c/", "a\x00", "a\xff", "a\xff\xff", "a\xff\xff\xff",
		"ab", "b", "\xff", "\xff\xff", "0", "c", "zzz", strings.Repeat("a", meta.MaxKeyLen+10),
	} {
		kvs, rev := e.mustList(p)
		got := make([]string, len(kvs))
		for i, kv := range kvs {
			got[i] = kv.Key
			require.Equal(t, "value of "+kv.Key, string(kv.Value), "List %q: value of %q", p, kv.Key)
			require.Equal(t, revs[kv.Key], kv.Revision, "List %q: revision of %q", p, kv.Key)
			require.LessOrEqual(t, kv.Revision, rev, "List %q: %q is above the list's revision", p, kv.Key)
		}
		want := withPrefix(p)
		if len(want) == 0 {
			require.Emptyf(t, got, "List %q", p)
		} else {
			require.Equalf(t, want, got, "List %q", p)
		}
	}
}

// testListRevision: List returns the store revision of its read: at or
// above every write before it, below every write after it, also when no
// key matches.
func testListRevision(e *env) {
	t := e.t
	r1 := e.mustPut("r/1", []byte("1"), meta.Absent)
	_, l1 := e.mustList("r/")
	require.GreaterOrEqual(t, l1, r1, "List after a write returned a revision below it")
	_, lnone := e.mustList("nothing/")
	require.GreaterOrEqual(t, lnone, r1, "List matching nothing returned a revision below the last write")
	r2 := e.mustPut("other/1", []byte("1"), meta.Absent)
	require.Greater(t, r2, l1, "a write after List got a revision at or below the list's")
	_, l2 := e.mustList("r/")
	require.GreaterOrEqual(t, l2, r2, "List's revision does not count a write outside its prefix")
	e.mustDelete("other/1", r2)
	_, l3 := e.mustList("r/")
	require.Greater(t, l3, r2, "List's revision does not count a delete")
}

// testListSnapshot: List reads at one revision: keys that are always
// written together by one Commit are always listed with equal values.
func testListSnapshot(e *env) {
	t := e.t
	const (
		keys    = 10
		commits = 60
	)
	txn := func(n int) meta.Txn {
		var txn meta.Txn
		for k := range keys {
			txn.Puts = append(txn.Puts, meta.KV{Key: "snap/" + strconv.Itoa(k), Value: []byte(strconv.Itoa(n))})
		}
		return txn
	}
	e.mustCommit(txn(0))
	var (
		wg        sync.WaitGroup
		writerErr error
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		for n := 1; n <= commits; n++ {
			if _, err := e.s.Commit(ctx, txn(n)); err != nil {
				writerErr = errors.Wrapf(err, "commit %d", n)
				return
			}
		}
	}()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	lists := 0
	for done := false; !done; lists++ {
		select {
		case <-stop:
			done = true // one more list after the last commit
		case <-deadline.C:
			require.FailNowf(t, "watchdog", "%d commits not done within %s", commits, waitTimeout)
		default:
		}
		kvs, rev := e.mustList("snap/")
		require.Len(t, kvs, keys, "List of keys that always exist")
		for _, kv := range kvs {
			require.Equal(t, string(kvs[0].Value), string(kv.Value), "List is not one snapshot: %q and %q were committed together", kvs[0].Key, kv.Key)
			require.Equal(t, kvs[0].Revision, kv.Revision, "List is not one snapshot: revisions of %q and %q", kvs[0].Key, kv.Key)
			require.LessOrEqual(t, kv.Revision, rev, "List: %q is above the list's revision", kv.Key)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	e.wait(done, "the writer")
	require.NoError(t, writerErr)
	kvs, _ := e.mustList("snap/")
	require.Equal(t, strconv.Itoa(commits), string(kvs[0].Value), "after %d lists", lists)
}
