package adaptortest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// testResumeWithSplitMessages resumes after every delivered message, with
// split messages interleaved with small ones from several appenders: every
// resume point delivers exactly the rest, nothing lost, nothing twice.
func testResumeWithSplitMessages(t *testing.T, c walimplstest.Cluster) {
	o := opener(t, c)
	const partBytes = 4 << 10
	w := open(t, o, channelName("resume-split"), 1, adaptor.Options{TimeTickInterval: 2 * time.Millisecond, PartBytes: partBytes})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	const (
		appenders = 3
		each      = 16
	)
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 5))
			for i := range each {
				size := 16 + r.IntN(64)
				if i%3 == 0 {
					size = partBytes + r.IntN(3*partBytes) // split into 2 to 4 parts
				}
				payload := make([]byte, size)
				copy(payload, fmt.Sprintf("g%d-%02d-", g, i))
				m, _ := message.New(payload, map[string]string{"g": fmt.Sprint(g)})
				if _, err := w.Append(ctx, m); err != nil {
					errs <- err
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
	const total = appenders * each
	s, err := w.Read(ctx, adaptor.ReadOption{Name: "all"})
	require.NoError(t, err)
	all := collect(t, s, total, nil)
	require.NoError(t, s.Close())

	lost := 0
	for i := range all {
		cp, err := cursor.CheckpointOf(all[i])
		require.NoError(t, err)
		r, err := w.Read(ctx, adaptor.ReadOption{Name: "resumed", DeliverPolicy: cursor.After(cp)})
		require.NoError(t, err)
		rest := collectOrTimeout(r, total-i-1, 10*time.Second)
		_ = r.Close()
		if len(rest) != total-i-1 {
			lost++
			t.Errorf("resumed after message %d (%s): %d of %d delivered", i, cp, len(rest), total-i-1)
			continue
		}
		for j, m := range rest {
			require.Equalf(t, string(all[i+1+j].Payload()), string(m.Payload()), "resumed after message %d: message %d", i, j)
		}
	}
	require.Zerof(t, lost, "%d of %d resume points lost messages", lost, len(all))
}

// collectOrTimeout reads up to n messages, for at most d of silence.
func collectOrTimeout(s walimpls.Scanner, n int, d time.Duration) []message.Immutable {
	var out []message.Immutable
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				return out
			}
			out = append(out, m)
		case <-time.After(d):
			return out
		}
	}
	return out
}
