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

// jitter delays each request by a random latency (a slow store whose
// pipelined PUTs land out of order).
type jitter struct {
	next http.RoundTripper
	mu   sync.Mutex
	r    *rand.Rand
}

func (j *jitter) RoundTrip(r *http.Request) (*http.Response, error) {
	j.mu.Lock()
	d := time.Duration(j.r.IntN(4000)) * time.Microsecond
	j.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return j.next.RoundTrip(r)
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
				return &jitter{next: rt, r: rand.New(rand.NewPCG(seed, 1))}
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
						_, err := walimpls.Append(context.Background(), old, m)
						if err != nil {
							if !errors.Is(err, walimpls.ErrFenced) {
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
			require.Eventually(t, func() bool { return seq.Load() > 40 }, 20*time.Second, time.Millisecond)
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
