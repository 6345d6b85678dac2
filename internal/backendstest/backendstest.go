// Package backendstest starts every backend a test may put a chain's
// segments on, each a real peer in the test's process: the memory
// backend, the local backend in a temporary directory, Kafka on an
// in-process kfake broker, Pulsar on the repository's pulsartest broker
// and S3 on an in-process gofakes3 (s3test.Fake). Everything is closed by
// the test's cleanup.
package backendstest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// Kinds are the backends Start can start, by their registered names.
var Kinds = []string{memory.Name, local.Name, kafka.Name, pulsar.Name, s3.Name}

// GoroutinesToIgnore are the functions of pulsar-client-go goroutines that
// outlive a closed producer or consumer (see the pulsar backend's
// main_test.go): a package whose tests use the pulsar entry passes them to
// goleak.IgnoreAnyFunction (a producer's reconnect goroutine may have a
// lookup's retry on top of it).
var GoroutinesToIgnore = []string{
	"github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages",
	"github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).runEventsLoop.func1",
	"github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).grabConn.func1",
}

// Backends are started backends: an opener per entry, keyed by entry name
// (the kind's name unless Add named it otherwise).
type Backends struct {
	openers map[string]walimpls.Opener
	kinds   map[string]string
}

// Start starts the backends of kinds (all of Kinds when none is given),
// each as an entry named after its kind.
func Start(tb testing.TB, kinds ...string) *Backends {
	tb.Helper()
	if len(kinds) == 0 {
		kinds = Kinds
	}
	b := &Backends{openers: map[string]walimpls.Opener{}, kinds: map[string]string{}}
	for _, k := range kinds {
		b.Add(tb, k, k)
	}
	return b
}

// Add starts another backend of kind as the entry name.
func (b *Backends) Add(tb testing.TB, name, kind string) walimpls.Opener {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o walimpls.Opener
	var err error
	switch kind {
	case memory.Name:
		o, err = memory.New(ctx, memory.Config{Cluster: memory.NewCluster()})
	case local.Name:
		o, err = local.New(ctx, local.Config{Dir: tb.TempDir(), Sync: local.SyncNone})
	case kafka.Name:
		o, err = startKafka(tb, ctx)
	case pulsar.Name:
		o, err = startPulsar(tb, ctx)
	case s3.Name:
		o, err = startS3(tb, ctx)
	default:
		err = errors.Newf("backendstest: unknown kind %q", kind)
	}
	if err != nil {
		tb.Fatalf("backendstest: start %s: %v", name, err)
	}
	tb.Cleanup(func() { _ = o.Close() })
	b.openers[name] = o
	b.kinds[name] = kind
	return o
}

// Put adds an opener the test made itself (another configuration of a
// kind, say) as the entry name of kind; the test closes it.
func (b *Backends) Put(name, kind string, o walimpls.Opener) {
	b.openers[name] = o
	b.kinds[name] = kind
}

// Entry returns the opener of the entry name, nil when none.
func (b *Backends) Entry(name string) walimpls.Opener { return b.openers[name] }

// Lookup returns the kind and the opener of the entry name; ok is false
// when there is none. chainread.LookupFunc(b.Lookup) is what a chain needs
// of the entries (Openers and Describe): this package starts backends and
// knows nothing of chains.
func (b *Backends) Lookup(name string) (kind string, o walimpls.Opener, ok bool) {
	kind, ok = b.kinds[name]
	return kind, b.openers[name], ok
}

// Names returns the entries' names, sorted.
func (b *Backends) Names() []string { return slices.Sorted(maps.Keys(b.kinds)) }

func startKafka(tb testing.TB, ctx context.Context) (walimpls.Opener, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		return nil, err
	}
	tb.Cleanup(c.Close)
	return kafka.New(ctx, kafka.Config{
		SeedBrokers:    c.ListenAddrs(),
		MetadataMinAge: 10 * time.Millisecond,
		RetryBackoff:   10 * time.Millisecond,
		CreateTimeout:  10 * time.Second,
	})
}

func startPulsar(tb testing.TB, ctx context.Context) (walimpls.Opener, error) {
	br := pulsartest.Start(tb, pulsartest.Config{})
	return pulsar.New(ctx, pulsar.Config{
		ServiceURL:        br.URL(),
		OperationTimeout:  10 * time.Second,
		ConnectionTimeout: 5 * time.Second,
		TakeOverTimeout:   10 * time.Second,
		TakeOver:          func(_ context.Context, topic string) error { return br.UnloadTopic(topic) },
		DeleteTopic: func(_ context.Context, topic string) error {
			if err := br.DeleteTopic(topic); !errors.Is(err, pulsartest.ErrTopicNotFound) {
				return err
			}
			return nil
		},
		TopicExists: func(_ context.Context, topic string) (bool, error) { return br.TopicExists(topic) },
	})
}

// startS3 starts gofakes3 and an Opener on it that flushes and polls
// often: tests append one message at a time, and the defaults (200 ms)
// would make each wait for the interval.
func startS3(tb testing.TB, ctx context.Context) (walimpls.Opener, error) {
	cfg := s3test.Fake(tb).Config("")
	cfg.FlushInterval = 2 * time.Millisecond
	cfg.PollInterval = 10 * time.Millisecond
	return s3.New(ctx, cfg)
}
