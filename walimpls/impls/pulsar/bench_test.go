package pulsar

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// The benchmarks compare the backend with raw pulsar-client-go (default
// batching) against the same pulsartest broker in the same run; compare
// ratios, not absolute numbers across runs. Every sub-benchmark uses its
// own topic.

const benchRecord = 1 << 10

// benchBatch is the size of the batches of the AppendBatch benchmarks.
const benchBatch = 16

func rawClient(b *testing.B, url string) pulsar.Client {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, Logger: plog.DefaultNopLogger()})
	require.NoError(b, err)
	b.Cleanup(c.Close)
	return c
}

func rawProducer(b *testing.B, c pulsar.Client, topic string) pulsar.Producer {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: -1})
	require.NoError(b, err)
	b.Cleanup(p.Close)
	return p
}

func report(b *testing.B, start time.Time, records int) {
	b.ReportMetric(float64(records)/time.Since(start).Seconds(), "records/s")
}

func benchPayload() []byte {
	p := make([]byte, benchRecord)
	for i := range p {
		p[i] = byte(i * 7)
	}
	return p
}

func BenchmarkAppend(b *testing.B) {
	broker := pulsartest.Start(b, pulsartest.Config{})
	cfg := testConfig(broker)
	cfg.SendTimeout = -1
	payload := benchPayload()
	ctx := context.Background()
	topicN := 0
	topic := func() string { topicN++; return fmt.Sprintf("persistent://public/default/bench-raw-%d", topicN) }

	b.Run("raw-async", func(b *testing.B) {
		p := rawProducer(b, rawClient(b, broker.URL()), topic())
		b.SetBytes(benchRecord)
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(b.N)
		for range b.N {
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		require.NoError(b, p.FlushWithCtx(ctx))
		wg.Wait()
		report(b, start, b.N)
	})
	for _, k := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("raw-sync/appenders=%d", k), func(b *testing.B) {
			p := rawProducer(b, rawClient(b, broker.URL()), topic())
			b.SetBytes(benchRecord)
			b.ResetTimer()
			start := time.Now()
			walimplstest.Split(b.N, k, func(n int) {
				for range n {
					if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b, start, b.N)
		})
		b.Run(fmt.Sprintf("wal/appenders=%d", k), func(b *testing.B) {
			o, err := New(ctx, cfg)
			require.NoError(b, err)
			defer o.Close()
			w, err := o.Open(ctx, walimpls.Channel{Name: fmt.Sprintf("bench-%d-%d", k, b.N), Term: 1})
			require.NoError(b, err)
			m := message.Restore(payload, nil)
			b.SetBytes(benchRecord)
			b.ResetTimer()
			start := time.Now()
			walimplstest.Split(b.N, k, func(n int) {
				for range n {
					if _, err := walimpls.Append(ctx, w, m); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b, start, b.N)
		})
		b.Run(fmt.Sprintf("wal-batch%d/appenders=%d", benchBatch, k), func(b *testing.B) {
			o, err := New(ctx, cfg)
			require.NoError(b, err)
			defer o.Close()
			w, err := o.Open(ctx, walimpls.Channel{Name: fmt.Sprintf("bench-batch-%d-%d", k, b.N), Term: 1})
			require.NoError(b, err)
			batch := make([]message.Message, benchBatch)
			for i := range batch {
				batch[i] = message.Restore(payload, nil)
			}
			b.SetBytes(benchRecord)
			b.ResetTimer()
			start := time.Now()
			walimplstest.Split(b.N, k, func(n int) { // n records, in batches of benchBatch
				for ; n > 0; n -= benchBatch {
					if _, err := w.AppendBatch(ctx, batch[:min(n, benchBatch)]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b, start, b.N)
		})
	}
}

func BenchmarkScan(b *testing.B) {
	const records = 20000
	broker := pulsartest.Start(b, pulsartest.Config{})
	cfg := testConfig(broker)
	ctx := context.Background()
	o, err := New(ctx, cfg)
	require.NoError(b, err)
	defer o.Close()
	w, err := o.Open(ctx, walimpls.Channel{Name: "scan", Term: 1})
	require.NoError(b, err)
	m := message.Restore(benchPayload(), map[string]string{"_k": "0", "_tt": "123456789"})
	walimplstest.Split(records, 64, func(n int) {
		for range n {
			if _, err := walimpls.Append(ctx, w, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	topic := topicOf(cfg, "scan")
	c := rawClient(b, broker.URL())

	b.Run("raw", func(b *testing.B) {
		b.SetBytes(benchRecord * records)
		start := time.Now()
		for range b.N {
			r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
			require.NoError(b, err)
			for range records {
				if _, err := r.Next(ctx); err != nil {
					b.Fatal(err)
				}
			}
			r.Close()
		}
		report(b, start, b.N*records)
	})
	b.Run("wal", func(b *testing.B) {
		b.SetBytes(benchRecord * records)
		start := time.Now()
		for range b.N {
			s, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.All()})
			require.NoError(b, err)
			for range records {
				<-s.Chan()
			}
			_ = s.Close()
		}
		report(b, start, b.N*records)
	})
}
