package pulsar

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func testLogger() *slog.Logger {
	if os.Getenv("PULSAR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// startBroker starts a test broker for t; the backend takes topics over
// through the broker's unload hook, as it would through the admin API.
func startBroker(t testing.TB, cfg pulsartest.Config) (*pulsartest.Broker, Config) {
	t.Helper()
	b := pulsartest.Start(t, cfg)
	return b, testConfig(b)
}

// testConfig points at b; TakeOver is the equivalent of the admin API's
// topic unload.
func testConfig(b *pulsartest.Broker) Config {
	return Config{
		ServiceURL:        b.URL(),
		OperationTimeout:  10 * time.Second,
		ConnectionTimeout: 5 * time.Second,
		TakeOverTimeout:   10 * time.Second,
		TakeOver: func(_ context.Context, topic string) error {
			return b.UnloadTopic(topic)
		},
	}
}

func newOpener(t testing.TB, cfg Config) *Opener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := New(ctx, cfg, testLogger(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

func open(t testing.TB, o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
	return collect(t, s, n, 15*time.Second)
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

func payloads(ms []message.Immutable) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload())
	}
	return out
}
