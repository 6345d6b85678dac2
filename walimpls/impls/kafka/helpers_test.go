package kafka

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cursor"
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
	o, err := New(ctx, cfg, walimpls.WithLogger(testLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// Shorter names for the suite's helpers, with this backend's timeouts.

func open(t testing.TB, o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	t.Helper()
	return walimplstest.Open(t, o, name, term, mode, 10*time.Second)
}

func readN(t testing.TB, w walimpls.WALImpl, p cursor.Policy, n int) []message.Immutable {
	t.Helper()
	return walimplstest.ReadN(t, w, p, n, 10*time.Second)
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

func seq(t testing.TB, id message.ID) int64 {
	t.Helper()
	s, err := message.SeqOf(Name, id)
	require.NoError(t, err)
	return s
}

// logPartitionDump logs the log partition's bounds (log start, last stable
// offset, high watermark), the producers the broker holds open state for,
// and every record from offset from on, control records included: what a
// failed read_committed test needs to tell a stuck transaction from a lost
// record.
func logPartitionDump(t testing.TB, cfg Config, topic string, from int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.SeedBrokers...), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {logPartition: kgo.NewOffset().At(from)}}))
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	start, hwm, err := listBounds(ctx, adm, topic, logPartition, false)
	_, lso, err2 := listBounds(ctx, adm, topic, logPartition, true)
	t.Logf("dump %s/%d: log start %d, last stable %d, high watermark %d (%v, %v)", topic, logPartition, start, lso, hwm, err, err2)
	if ps, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {logPartition: {}}}); err != nil {
		t.Logf("dump: describe producers: %v", err)
	} else {
		ps.EachProducer(func(p kadm.DescribedProducer) {
			t.Logf("dump: producer %d epoch %d, open transaction from offset %d", p.ProducerID, p.ProducerEpoch, p.CurrentTxnStartOffset)
		})
	}
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			t.Logf("offset %d control=%v producer %d epoch %d key %x value %q headers %v",
				r.Offset, r.Attrs.IsControl(), r.ProducerID, r.ProducerEpoch, r.Key, r.Value, r.Headers)
		})
	}
}
