package pulsar

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
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

// testConfig points at b; TakeOver, DeleteTopic and TopicExists are the
// equivalents of the admin API's topic unload, forced delete and stats
// (adminConfig calls the admin API itself).
func testConfig(b *pulsartest.Broker) Config {
	return Config{
		ServiceURL:        b.URL(),
		OperationTimeout:  10 * time.Second,
		ConnectionTimeout: 5 * time.Second,
		TakeOverTimeout:   10 * time.Second,
		TakeOver: func(_ context.Context, topic string) error {
			return b.UnloadTopic(topic)
		},
		DeleteTopic: func(_ context.Context, topic string) error {
			if err := b.DeleteTopic(topic); !errors.Is(err, pulsartest.ErrTopicNotFound) {
				return err
			}
			return nil
		},
		TopicExists: func(_ context.Context, topic string) (bool, error) {
			return b.TopicExists(topic)
		},
	}
}

// adminConfig points at b, which must serve its admin API, and leaves
// every topic operation to Config.AdminURL.
func adminConfig(b *pulsartest.Broker) Config {
	c := testConfig(b)
	c.TakeOver, c.DeleteTopic, c.TopicExists = nil, nil, nil
	c.AdminURL = b.AdminURL()
	return c
}

func newOpener(t testing.TB, cfg Config) *Opener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := New(ctx, cfg, walimpls.WithLogger(testLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// Shorter names for the suite's helpers, with this backend's timeouts.

func open(t testing.TB, o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	t.Helper()
	return walimplstest.Open(t, o, name, term, mode, 20*time.Second)
}

func readN(t testing.TB, w walimpls.WALImpl, p cursor.Policy, n int) []message.Immutable {
	t.Helper()
	return walimplstest.ReadN(t, w, p, n, 15*time.Second)
}

var (
	msg         = walimplstest.Message
	appendOK    = walimplstest.AppendOK
	collect     = walimplstest.Collect
	nothingMore = walimplstest.NothingMore
	// appendMany appends n messages one after the other: each is an
	// entry of its own (the next append starts after the last's receipt).
	appendMany    = walimplstest.AppendMany
	requireSuffix = walimplstest.RequireSuffix
)

func payloads(ms []message.Immutable) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload())
	}
	return out
}
