package kafka

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newCluster starts a one-broker kfake cluster on loopback, closed at the
// end of the test.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.Ports(0)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// testConfig points at c with fast metadata refreshes and retries.
func testConfig(c *kfake.Cluster) Config {
	return Config{
		SeedBrokers:    c.ListenAddrs(),
		MetadataMinAge: 10 * time.Millisecond,
		RetryBackoff:   10 * time.Millisecond,
		CreateTimeout:  10 * time.Second,
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("KAFKA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func newOpener(t testing.TB, cfg Config) *Opener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := New(ctx, cfg, testLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

func open(t testing.TB, o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := o.Open(ctx, walimpls.Channel{Name: name, Term: term, Mode: mode})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func msg(t testing.TB, payload string, props map[string]string) message.Message {
	t.Helper()
	m, err := message.New([]byte(payload), props)
	require.NoError(t, err)
	return m
}

func appendOK(t testing.TB, w walimpls.WALImpl, m message.Message) message.ID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := w.Append(ctx, m)
	require.NoError(t, err)
	return id
}

// readN reads n messages from a fresh scanner, failing after a timeout.
func readN(t testing.TB, w walimpls.WALImpl, p walimpls.DeliverPolicy, n int) []message.Immutable {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: t.Name(), DeliverPolicy: p})
	require.NoError(t, err)
	defer s.Close()
	return collect(t, s, n, 10*time.Second)
}

func collect(t testing.TB, s walimpls.Scanner, n int, d time.Duration) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	timeout := time.After(d)
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				require.FailNowf(t, "scanner ended", "after %d of %d messages: %v", len(out), n, s.Error())
			}
			out = append(out, m)
		case <-timeout:
			require.FailNowf(t, "timeout", "read %d of %d messages", len(out), n)
		}
	}
	return out
}

// nothingMore checks that s delivers nothing within d.
func nothingMore(t testing.TB, s walimpls.Scanner, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-s.Chan():
		if ok {
			require.FailNowf(t, "unexpected message", "%s: %q", m.ID(), m.Payload())
		}
	case <-time.After(d):
	}
}

func seq(t testing.TB, id message.ID) int64 {
	t.Helper()
	s, err := message.SeqOf(Name, id)
	require.NoError(t, err)
	return s
}
