package metatest

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
)

// testConcurrentCAS: goroutines increment one counter with read, Put at
// the read revision, retry on ErrConflict: no increment is lost, and the
// successful writes, in revision order, wrote 1, 2, 3, ...
func testConcurrentCAS(e *env) {
	t := e.t
	const (
		workers = 8
		each    = 25
	)
	type success struct{ rev, value int64 }
	var (
		mu    sync.Mutex
		wins  []success
		fails []error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			for done := 0; done < each; {
				kv, err := e.s.Get(ctx, "counter")
				var n int64
				switch {
				case errors.Is(err, meta.ErrNotFound):
					kv.Revision = meta.Absent
				case err != nil:
					mu.Lock()
					fails = append(fails, err)
					mu.Unlock()
					return
				default:
					if n, err = strconv.ParseInt(string(kv.Value), 10, 64); err != nil {
						mu.Lock()
						fails = append(fails, errors.Wrapf(err, "counter value %q", kv.Value))
						mu.Unlock()
						return
					}
				}
				rev, err := e.s.Put(ctx, "counter", []byte(strconv.FormatInt(n+1, 10)), kv.Revision)
				if errors.Is(err, meta.ErrConflict) {
					continue
				}
				mu.Lock()
				if err != nil {
					fails = append(fails, err)
				} else {
					wins = append(wins, success{rev, n + 1})
				}
				mu.Unlock()
				if err != nil {
					return
				}
				done++
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	e.wait(done, "the incrementing goroutines")
	require.Empty(t, fails)
	require.Len(t, wins, workers*each)
	sort.Slice(wins, func(i, j int) bool { return wins[i].rev < wins[j].rev })
	for i, w := range wins {
		require.Equalf(t, int64(i+1), w.value, "the write at revision %d (#%d in revision order) wrote %d: an update was lost", w.rev, i+1, w.value)
		if i > 0 {
			require.Greater(t, w.rev, wins[i-1].rev, "two successful writes got revision %d", w.rev)
		}
	}
	e.hasValue("counter", []byte(strconv.Itoa(workers*each)), wins[len(wins)-1].rev)
}

// testConcurrentCommit: goroutines move units between accounts with
// Commits conditioned on both accounts' revisions while a reader lists
// them: the total never changes, in any List, and no transfer is lost.
func testConcurrentCommit(e *env) {
	t := e.t
	const (
		accounts = 4
		workers  = 4
		each     = 15
		initial  = 100
	)
	key := func(i int) string { return "acct/" + strconv.Itoa(i) }
	var txn meta.Txn
	for i := range accounts {
		txn.Puts = append(txn.Puts, meta.KV{Key: key(i), Value: []byte(strconv.Itoa(initial))})
	}
	e.mustCommit(txn)
	parse := func(kv meta.KV) (int, error) {
		n, err := strconv.Atoi(string(kv.Value))
		return n, errors.Wrapf(err, "account %q", kv.Key)
	}
	var (
		mu    sync.Mutex
		fails []error
		wins  int
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		fails = append(fails, err)
		mu.Unlock()
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			for i := 0; i < each; {
				from, to := key((w+i)%accounts), key((w+i+1)%accounts)
				kf, err1 := e.s.Get(ctx, from)
				kt, err2 := e.s.Get(ctx, to)
				if err := errors.CombineErrors(err1, err2); err != nil {
					fail(err)
					return
				}
				nf, err1 := parse(kf)
				nt, err2 := parse(kt)
				if err := errors.CombineErrors(err1, err2); err != nil {
					fail(err)
					return
				}
				_, err := e.s.Commit(ctx, meta.Txn{
					Conds: []meta.Cond{{Key: from, Revision: kf.Revision}, {Key: to, Revision: kt.Revision}},
					Puts: []meta.KV{
						{Key: from, Value: []byte(strconv.Itoa(nf - 1))},
						{Key: to, Value: []byte(strconv.Itoa(nt + 1))},
					},
				})
				if errors.Is(err, meta.ErrConflict) {
					continue
				}
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				wins++
				mu.Unlock()
				i++
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	total := func() int {
		kvs, _ := e.mustList("acct/")
		require.Len(t, kvs, accounts)
		sum := 0
		for _, kv := range kvs {
			n, err := parse(kv)
			require.NoError(t, err)
			sum += n
		}
		return sum
	}
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-deadline.C:
			require.FailNowf(t, "watchdog", "transfers not done within %s", waitTimeout)
		default:
		}
		require.Equal(t, accounts*initial, total(), "a List saw part of a transfer")
	}
	e.wait(done, "the transferring goroutines")
	require.Empty(t, fails)
	require.Equal(t, workers*each, wins)
	require.Equal(t, accounts*initial, total())
	// Worker w moves each units around a ring starting at account w: the
	// net effect is known.
	net := make([]int, accounts)
	for w := range workers {
		for i := range each {
			net[(w+i)%accounts]--
			net[(w+i+1)%accounts]++
		}
	}
	for i := range accounts {
		e.hasValueOnly(key(i), strconv.Itoa(initial+net[i]))
	}
}

// hasValueOnly checks key's value, whatever its revision.
func (e *env) hasValueOnly(key, value string) {
	e.t.Helper()
	require.Equal(e.t, value, string(e.mustGet(key).Value), "value of %q", key)
}
