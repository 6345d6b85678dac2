package s3

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// slowLink holds each request for latency() before sending it: a random
// latency makes a slow store whose pipelined PUTs land out of order; a
// fixed one an open on a slow link.
type slowLink struct {
	next    http.RoundTripper
	latency func() time.Duration
}

func (l slowLink) RoundTrip(r *http.Request) (*http.Response, error) {
	t := time.NewTimer(l.latency())
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return l.next.RoundTrip(r)
}

// jitter is a latency of up to 4 ms drawn from a seeded source.
func jitter(seed uint64) func() time.Duration {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 1))
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(r.IntN(4000)) * time.Microsecond
	}
}

// Takeovers while a writer pipelines through a jittery store: nothing the
// old writer acknowledged is lost, nothing is acknowledged once the new
// open returned, and no reader delivers an old message after the new
// owner's first.
func TestTakeoverUnderPipelining(t *testing.T) {
	st := newTestStore(t)
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := st.config(func(rt http.RoundTripper) http.RoundTripper {
				return slowLink{next: rt, latency: jitter(seed)}
			})
			cfg.FlushInterval = time.Millisecond
			cfg.FlushRecords = 3
			plain := cfg
			plain.HTTPClient = &http.Client{Transport: st.base}
			oldNode, newNode := newOpener(t, cfg), newOpener(t, plain)
			name := fmt.Sprint("takeover-", seed)
			old := openWAL(t, oldNode, name, 1, walimpls.ReadWrite)
			var (
				openedAt  atomic.Int64 // unix nanos when the new open returned
				mu        sync.Mutex
				acked     = map[string]bool{}
				lateAcks  []string
				wg        sync.WaitGroup
				seq       atomic.Int64
				appenders = 4
			)
			// The appenders are stopped and joined however this test ends,
			// before the cleanups close the WAL they append to, so a failure
			// here is reported as itself and not as theirs after the end.
			stop, cancel := context.WithCancel(context.Background())
			defer func() {
				cancel()
				wg.Wait()
			}()
			for range appenders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Until the fence stops it: an append that began after
					// the new open returned must not succeed.
					for {
						p := fmt.Sprint("old-", seq.Add(1))
						m, _ := message.New([]byte(p), nil)
						began := time.Now().UnixNano()
						_, err := walimpls.Append(stop, old, m)
						if err != nil {
							if stop.Err() == nil && !errors.Is(err, walimpls.ErrFenced) {
								t.Errorf("the old writer failed with %v, not fenced", err)
							}
							return
						}
						mu.Lock()
						acked[p] = true
						if o := openedAt.Load(); o != 0 && began > o {
							lateAcks = append(lateAcks, p)
						}
						mu.Unlock()
					}
				}()
			}
			require.Eventually(t, func() bool { return seq.Load() > 40 }, time.Minute, time.Millisecond)
			nw := openWAL(t, newNode, name, 2, walimpls.ReadWrite)
			openedAt.Store(time.Now().UnixNano())
			wg.Wait()
			appendOK(t, nw, "new")
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, lateAcks, "appends begun after the new open returned were acknowledged")
			got := readPayloads(t, openWAL(t, newOpener(t, plain), name, 0, walimpls.ReadOnly), "new")
			require.Equal(t, "new", got[len(got)-1])
			seen := map[string]bool{}
			for _, p := range got[:len(got)-1] {
				require.False(t, seen[p], "%s delivered twice", p)
				seen[p] = true
			}
			for p := range acked {
				require.True(t, seen[p], "acknowledged %s is not read back", p)
			}
		})
	}
}

// A takeover over a slow link while the old writer, on a fast one, keeps
// flushing many slots during each of the new open's requests: the seal
// must outrun the writer, not chase it slot by slot for as long as it has
// appends; and what the writer acknowledged stays readable.
func TestSealOutrunsAFastWriter(t *testing.T) {
	st := newTestStore(t)
	fast := st.config(nil)
	fast.FlushInterval = time.Millisecond
	fast.FlushRecords = 1
	slow := st.config(func(rt http.RoundTripper) http.RoundTripper {
		return slowLink{next: rt, latency: func() time.Duration { return 25 * time.Millisecond }}
	})
	slow.Prefix = fast.Prefix
	oldNode, newNode := newOpener(t, fast), newOpener(t, slow)
	old := openWAL(t, oldNode, "outrun", 1, walimpls.ReadWrite)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    []string
		appended atomic.Int64
	)
	stop, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		wg.Wait()
	}()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				p := fmt.Sprintf("old-%d-%d", g, i)
				m, _ := message.New([]byte(p), nil)
				if _, err := walimpls.Append(stop, old, m); err != nil {
					if stop.Err() == nil && !errors.Is(err, walimpls.ErrFenced) {
						t.Errorf("the old writer failed with %v, not fenced", err)
					}
					return
				}
				mu.Lock()
				acked = append(acked, p)
				mu.Unlock()
				appended.Add(1)
			}
		}()
	}
	// The writer is well under way before the takeover starts.
	require.Eventually(t, func() bool { return appended.Load() > 100 }, time.Minute, time.Millisecond)
	nw := openWAL(t, newNode, "outrun", 2, walimpls.ReadWrite)
	wg.Wait()
	appendOK(t, nw, "new")
	got := readPayloads(t, openWAL(t, newOpener(t, fast), "outrun", 0, walimpls.ReadOnly), "new")
	seen := map[string]bool{}
	for _, p := range got {
		seen[p] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range acked {
		require.True(t, seen[p], "acknowledged %s is not read back", p)
	}
}
