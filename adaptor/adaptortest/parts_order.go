package adaptortest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// testBatchAndAsyncOrder runs concurrent AppendBatch callers and concurrent
// AppendAsync callers: every batch is delivered in slice order with its
// timeticks increasing in slice order, and every caller's async appends are
// delivered in call order.
func testBatchAndAsyncOrder(t *testing.T, c walimplstest.Cluster) {
	o := opener(t, c)
	w := open(t, o, channelName("order"), 1, adaptor.Options{TimeTickInterval: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	const (
		batchers = 3
		batches  = 15
		asyncers = 3
		asyncs   = 60
	)
	var wg sync.WaitGroup
	errs := make(chan error, batchers+asyncers)
	total := 0
	for g := range batchers {
		for b := range batches {
			total += 1 + (g+b)%8
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				msgs := make([]message.Message, 1+(g+b)%8)
				for i := range msgs {
					msgs[i], _ = message.New([]byte(fmt.Sprintf("b%d-%02d-%d", g, b, i)), nil)
				}
				res, err := w.AppendBatch(ctx, msgs)
				if err != nil {
					errs <- fmt.Errorf("batcher %d batch %d: %w", g, b, err)
					return
				}
				for i := 1; i < len(res); i++ {
					if res[i].TimeTick <= res[i-1].TimeTick {
						errs <- fmt.Errorf("batcher %d batch %d: timetick %d of message %d after %d", g, b, res[i].TimeTick, i, res[i-1].TimeTick)
						return
					}
				}
			}
		}()
	}
	total += asyncers * asyncs
	for g := range asyncers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cbs sync.WaitGroup
			var mu sync.Mutex
			ticks := make([]uint64, asyncs)
			var first error
			for i := range asyncs {
				m, _ := message.New([]byte(fmt.Sprintf("a%d-%03d", g, i)), nil)
				cbs.Add(1)
				w.AppendAsync(ctx, m, func(r adaptor.AppendResult, err error) {
					defer cbs.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil && first == nil {
						first = err
					}
					ticks[i] = r.TimeTick
				})
			}
			cbs.Wait()
			if first != nil {
				errs <- fmt.Errorf("asyncer %d: %w", g, first)
				return
			}
			for i := 1; i < asyncs; i++ {
				if ticks[i] <= ticks[i-1] {
					errs <- fmt.Errorf("asyncer %d: append %d got timetick %d after %d", g, i, ticks[i], ticks[i-1])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, w.Sync(ctx))

	s, err := w.Read(ctx, adaptor.ReadOption{Name: "order"})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	got := collect(t, s, total, nil)
	lastOf := map[string]string{} // batch or async caller → its last delivered payload
	for _, m := range got {
		p := string(m.Payload())
		key := p[:strings.LastIndex(p, "-")]
		if strings.HasPrefix(p, "a") {
			key = p[:2]
		}
		if prev, ok := lastOf[key]; ok {
			require.Lessf(t, prev, p, "%s delivered after %s", p, prev)
		}
		lastOf[key] = p
	}
}
