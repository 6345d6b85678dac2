package local

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func testConfig(dir string) Config {
	return Config{Dir: dir, SegmentBytes: 256 << 10, MaxMessageBytes: 64 << 10}
}

func openStore(t *testing.T, cfg Config, opts ...walimpls.Option) *Store {
	t.Helper()
	s, err := New(context.Background(), cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// withFS is cfg doing its file I/O through fs.
func withFS(cfg Config, fs FS) Config {
	cfg.FS = fs
	return cfg
}

func openWAL(t *testing.T, o walimpls.Opener, name string, term int64) walimpls.WALImpl {
	t.Helper()
	w, err := o.Open(context.Background(), walimpls.Channel{Name: name, Term: term})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func msg(t *testing.T, payload string) message.Message {
	t.Helper()
	m, err := message.New([]byte(payload), map[string]string{"p": payload})
	require.NoError(t, err)
	return m
}

// appendN appends n messages "<tag>-<i>" and returns their IDs.
func appendN(t *testing.T, w walimpls.WALImpl, tag string, n int) []message.ID {
	t.Helper()
	ids := make([]message.ID, n)
	for i := range ids {
		id, err := walimpls.Append(context.Background(), w, msg(t, fmt.Sprintf("%s-%d", tag, i)))
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}

// readN reads exactly n messages from policy p and closes the scanner.
func readN(t *testing.T, w walimpls.WALImpl, p cursor.Policy, n int) []message.Immutable {
	t.Helper()
	s, err := w.Read(context.Background(), walimpls.ReadOption{Name: "test", DeliverPolicy: p})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	out := make([]message.Immutable, 0, n)
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended after %d of %d: %v", len(out), n, s.Error())
			out = append(out, m)
		case <-time.After(10 * time.Second):
			require.FailNowf(t, "timeout", "read %d of %d", len(out), n)
		}
	}
	return out
}

// segmentRoom returns the segment being framed and the room it has left
// for frames (its seal's kept apart). An append is framed before it
// returns, whatever the policy.
func segmentRoom(s *Store) (seg uint64, room int64) {
	s.j.mu.Lock()
	defer s.j.mu.Unlock()
	return s.j.fseg, s.j.flimit - s.j.foff - sealReserve
}

// readAvailable reads from p through the last message the channel holds
// when it is called (Last): everything stored before the call, without
// waiting for the scanner to fall idle. It returns early, with the
// scanner's error, when the scanner ends.
func readAvailable(t *testing.T, w walimpls.WALImpl, p cursor.Policy) ([]message.Immutable, error) {
	t.Helper()
	last, err := w.Last(context.Background())
	if err != nil {
		return nil, err
	}
	if last.IsZero() {
		return nil, nil
	}
	s, err := w.Read(context.Background(), walimpls.ReadOption{Name: "test", DeliverPolicy: p})
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Close() }()
	watchdog := time.NewTimer(10 * time.Second)
	defer watchdog.Stop()
	var out []message.Immutable
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				<-s.Done()
				return out, s.Error()
			}
			out = append(out, m)
			if !m.ID().LT(last) {
				return out, nil
			}
		case <-watchdog.C:
			require.FailNowf(t, "watchdog", "read %d messages, not through the last, %s", len(out), last)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// logCapture collects a store's log lines (text format) for tests to check.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the lines holding every one of the given substrings.
func (c *logCapture) lines(subs ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range strings.Split(c.buf.String(), "\n") {
		ok := l != ""
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}
