package s3

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls"
)

// slotGets counts the GETs of slots.
func slotGets(c *counter) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.all {
		if strings.HasPrefix(r, "GET ") && strings.Contains(r, "/e0") && !strings.HasSuffix(r, "/hint") {
			n++
		}
	}
	return n
}

// Scanners of the writer's own Opener get its flushes without a GET.
func TestOwnFlushesReachScannersWithoutGet(t *testing.T) {
	st := newTestStore(t)
	var cnt *counter
	cfg := st.config(func(rt http.RoundTripper) http.RoundTripper { cnt = newCounter(rt); return cnt })
	o := newOpener(t, cfg)
	w := openWAL(t, o, "own", 1, walimpls.ReadWrite)
	appendOK(t, w, "before")
	var scanners []walimpls.Scanner
	for range 3 {
		s, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Latest()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		scanners = append(scanners, s)
	}
	cnt.reset()
	for i := range 20 {
		appendOK(t, w, "m")
		for _, s := range scanners {
			select {
			case m := <-s.Chan():
				require.Equal(t, "m", string(m.Payload()), "message %d", i)
			case <-time.After(10 * time.Second):
				require.FailNow(t, "not delivered")
			}
		}
	}
	require.Zero(t, slotGets(cnt), "slot GETs while tailing the Opener's own writer")
}

// Tailing scanners of one Opener share one poller: one GET per poll,
// whatever their number.
func TestSharedPoller(t *testing.T) {
	st := newTestStore(t)
	writer := newOpener(t, st.config(nil))
	cfg := st.config(nil)
	cfg.Prefix = writer.cfg.Prefix
	var cnt *counter
	cfg.HTTPClient = &http.Client{Transport: func() http.RoundTripper { cnt = newCounter(st.base); return cnt }()}
	clock := clockwork.NewFakeClock()
	reader := newOpener(t, cfg, walimpls.WithClock(clock))
	w := openWAL(t, writer, "shared", 1, walimpls.ReadWrite)
	appendOK(t, w, "before")
	r := openWAL(t, reader, "shared", 0, walimpls.ReadOnly)
	const n = 5
	var scanners []walimpls.Scanner
	for range n {
		s, err := r.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Latest()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		scanners = append(scanners, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "one poller waits")
	h := reader.hubOf("shared")
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		sum := 0
		for _, n := range h.waits {
			sum += n
		}
		return sum == n
	}, 10*time.Second, time.Millisecond, "every scanner waits in the hub")
	cnt.reset()
	for round := 1; round <= 3; round++ {
		clock.Advance(cfg.PollInterval)
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		require.Equal(t, round, slotGets(cnt), "one slot GET per poll, for %d scanners", n)
	}
	appendOK(t, w, "new")
	clock.Advance(cfg.PollInterval)
	for _, s := range scanners {
		select {
		case m := <-s.Chan():
			require.Equal(t, "new", string(m.Payload()))
		case <-ctx.Done():
			require.FailNow(t, "the poll's object did not reach every scanner")
		}
	}
}
