package local

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Appenders, truncations, segment deletion and tailing scanners on several
// channels at once: every scanner sees its channel's messages in order and
// without a gap, or ends with ErrPositionGone.
func TestStressAppendTruncateScan(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 64 << 10
	cfg.MaxMessageBytes = 8 << 10
	s := openStore(t, cfg)
	const channels, perChannel = 4, 300
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	finals := make([]func() error, channels)
	for c := 0; c < channels; c++ {
		w := openWAL(t, s, fmt.Sprintf("s%d", c), 1)
		var mu sync.Mutex
		var ids []message.ID
		finals[c] = func() error { return w.Truncate(ctx, ids[len(ids)-1]) }
		wg.Add(1)
		go func() { // appender: message i carries i
			defer wg.Done()
			for i := 0; i < perChannel; i++ {
				m, _ := message.New(make([]byte, 1000), map[string]string{"i": strconv.Itoa(i)})
				id, err := walimpls.Append(ctx, w, m)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		}()
		wg.Add(1)
		go func() { // truncator: keeps the last ~50
			defer wg.Done()
			for k := 0; k < 20; k++ {
				time.Sleep(5 * time.Millisecond) // paces the truncations; no check needs it
				mu.Lock()
				var upTo message.ID
				if len(ids) > 50 {
					upTo = ids[len(ids)-50]
				}
				mu.Unlock()
				if !upTo.IsZero() {
					if err := w.Truncate(ctx, upTo); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
		for r := 0; r < 2; r++ {
			wg.Add(1)
			go func() { // scanner: consecutive i, or gone
				defer wg.Done()
				for attempt := 0; ; attempt++ {
					sc, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.All(), ReadAheadBytes: 4096})
					if err != nil {
						errs <- err
						return
					}
					last := -1
					done := false
					for !done {
						select {
						case m, ok := <-sc.Chan():
							if !ok {
								done = true
								break
							}
							i, _ := strconv.Atoi(m.Properties().User()["i"])
							if last >= 0 && i != last+1 {
								errs <- errors.Newf("scanner skipped from %d to %d", last, i)
								_ = sc.Close()
								return
							}
							last = i
							if i == perChannel-1 {
								_ = sc.Close()
								return
							}
						case <-time.After(10 * time.Second):
							errs <- errors.New("scanner stalled")
							_ = sc.Close()
							return
						}
					}
					if err := sc.Error(); !errors.Is(err, walimpls.ErrPositionGone) {
						errs <- errors.Wrap(err, "scanner ended without ErrPositionGone")
						return
					}
					_ = sc.Close()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, f := range finals {
		require.NoError(t, f())
	}
	require.Eventually(t, func() bool {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segments) <= 2
	}, 10*time.Second, time.Millisecond, "truncation frees segments")
}
