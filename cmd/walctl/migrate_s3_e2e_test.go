package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/utility/backoff"
)

// appenders append to channels through the client, one message at a time
// per channel, until stopped, and keep what was acknowledged, in order.
type appenders struct {
	t    *testing.T
	cli  *client.Client
	stop chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	acked map[string][]string
	// more is signalled after each acknowledgement.
	more chan struct{}
	errs []error
}

func startAppenders(t *testing.T, cli *client.Client, channels ...string) *appenders {
	a := &appenders{t: t, cli: cli, stop: make(chan struct{}), acked: map[string][]string{}, more: make(chan struct{}, 1)}
	for _, ch := range channels {
		a.wg.Add(1)
		go a.run(ch)
	}
	t.Cleanup(a.halt)
	return a
}

func (a *appenders) run(ch string) {
	defer a.wg.Done()
	for i := 0; ; i++ {
		select {
		case <-a.stop:
			return
		default:
		}
		p := fmt.Sprintf("%s-%05d", ch, i)
		// Never cancelled by stop: each append ends acknowledged or
		// failed, so no append of unknown outcome is left in the history.
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		_, err := a.cli.Append(ctx, ch, client.Message{Payload: []byte(p)}, client.Options{Key: p})
		for errors.Is(err, client.ErrOutcomeUnknown) && ctx.Err() == nil {
			// What the client says to do: the same key again, which the
			// owner answers with the stored copy if there is one.
			_, err = a.cli.Append(ctx, ch, client.Message{Payload: []byte(p)}, client.Options{Key: p, Retry: true})
		}
		cancel()
		a.mu.Lock()
		if err != nil {
			a.errs = append(a.errs, fmt.Errorf("append %s: %w", p, err))
			a.mu.Unlock()
			return
		}
		a.acked[ch] = append(a.acked[ch], p)
		a.mu.Unlock()
		select {
		case a.more <- struct{}{}:
		default:
		}
	}
}

// waitEach waits until every channel has n more acknowledged appends than
// it had when called.
func (a *appenders) waitEach(ctx context.Context, n int, channels ...string) {
	a.mu.Lock()
	base := map[string]int{}
	for _, ch := range channels {
		base[ch] = len(a.acked[ch])
	}
	a.mu.Unlock()
	for {
		a.mu.Lock()
		done := len(a.errs) == 0
		for _, ch := range channels {
			done = done && len(a.acked[ch]) >= base[ch]+n
		}
		errs := slices.Clone(a.errs)
		a.mu.Unlock()
		require.Empty(a.t, errs, "an appender failed")
		if done {
			return
		}
		select {
		case <-a.more:
		case <-ctx.Done():
			require.FailNow(a.t, "appenders stalled", "waiting for %d more appends on each of %v", n, channels)
		}
	}
}

// halt stops the appenders and waits for them; it returns what each
// channel had acknowledged.
func (a *appenders) halt() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	a.wg.Wait()
}

// End to end on local, s3 and kafka entries side by side: walctl migrate
// moves channels local → s3 → kafka → s3 (every channel with -all, and one
// on its own) while an appender per channel writes through the client.
// Every acknowledged append is read back once, in order, across the four
// segments, and each segment of a channel got appends.
func TestMigrateS3UnderAppenders(t *testing.T) {
	h := newChainHarness(t, "local", "local", "s3", "kafka")
	h.startNode("n1")
	h.startNode("n2")
	channels := []string{"c0", "c1", "c2"}
	h.startCoordinator(channels...)
	cli, err := client.New(h.ctx, client.Config{Etcd: h.cli, Root: h.layout.Root,
		Retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(cli.Close)
	app := startAppenders(t, cli, channels...)
	app.waitEach(h.ctx, 5, channels...)

	r := h.walctl("migrate", "-all", "s3", "-dry-run")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Regexp(t, `c0 +local/c0 +0 +s3/c0-s1 +1 -> 2 +`, r.out)

	r = h.walctl("migrate", "-all", "s3", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl migrate -all s3 -wait:\n%s", r.out)
	require.Contains(t, r.out, "3/3 migrated")
	app.waitEach(h.ctx, 5, channels...)

	r = h.walctl("migrate", "c0", "kafka", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "1/1 migrated: c0 writes on kafka/c0-s2 (segment 2) at term 3")
	r = h.walctl("migrate", "-all", "kafka", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "2/2 migrated")
	app.waitEach(h.ctx, 5, channels...)

	r = h.walctl("migrate", "c1", "s3", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "1/1 migrated: c1 writes on s3/c1-s3 (segment 3) at term 4")
	r = h.walctl("migrate", "-all", "s3", "-wait")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "2/2 migrated")
	r = h.walctl("migrate", "-all", "s3")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Equal(t, "every channel is on s3 already\n", r.out)
	app.waitEach(h.ctx, 5, channels...)

	r = h.walctl("channels", "-v")
	require.Equal(t, exitOK, r.code, "%s", r)
	t.Logf("walctl channels -v:\n%s", r.out)
	require.Contains(t, r.out, "s3/c2-s3")

	app.halt()
	require.Empty(t, app.errs)
	for _, ch := range channels {
		c, err := h.store.Get(h.ctx, ch)
		require.NoError(t, err)
		require.NoError(t, c.Validate())
		var names []string
		for _, seg := range c.Segments {
			names = append(names, seg.Backend.Name)
		}
		require.Equal(t, []string{"local", "s3", "kafka", "s3"}, names, ch)

		want := app.acked[ch]
		var got []string
		segments := map[string]bool{}
		err = cli.Read(h.ctx, ch, client.ReadOptions{UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
			got = append(got, string(d.GetPayload()))
			segments[segmentOf(d.GetId())] = true
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, want, got, "%s: every acknowledged append once, in order, across the segments", ch)
		require.Equal(t, map[string]bool{"s0": true, "s1": true, "s2": true, "s3": true}, segments, "%s: every segment got appends", ch)
	}
}

// segmentOf is the segment of a chain ID: "s1/..." is segment 1, a bare
// ID segment 0.
func segmentOf(id string) string {
	if len(id) > 1 && id[0] == 's' {
		for i := 1; i < len(id); i++ {
			if id[i] == '/' {
				return id[:i]
			}
		}
	}
	return "s0"
}
