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
	"github.com/streamwal/streamwal/walimpls/walimplstest"
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

// Shorter names for the suite's helpers, with this backend's timeouts.

func open(t testing.TB, o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	t.Helper()
	return walimplstest.Open(t, o, name, term, mode, 10*time.Second)
}

func readN(t testing.TB, w walimpls.WALImpl, p walimpls.DeliverPolicy, n int) []message.Immutable {
	t.Helper()
	return walimplstest.ReadN(t, w, p, n, 10*time.Second)
}

var (
	msg         = walimplstest.Message
	appendOK    = walimplstest.AppendOK
	collect     = walimplstest.Collect
	nothingMore = walimplstest.NothingMore
)

func seq(t testing.TB, id message.ID) int64 {
	t.Helper()
	s, err := message.SeqOf(Name, id)
	require.NoError(t, err)
	return s
}
