package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// The benchmarks compare the backend with raw franz-go against the same
// kfake cluster in the same run; compare ratios, not absolute numbers
// across runs. Every sub-benchmark uses its own topic.

const benchRecord = 1 << 10

func benchCluster(b *testing.B) (*kfake.Cluster, Config) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(b, err)
	b.Cleanup(c.Close)
	cfg := Config{SeedBrokers: c.ListenAddrs()}
	return c, cfg
}

func rawProducer(b *testing.B, cfg Config) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.SeedBrokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.AllowAutoTopicCreation())
	require.NoError(b, err)
	b.Cleanup(cl.Close)
	return cl
}

func createTopic(b *testing.B, c *kfake.Cluster, topic string) {
	require.NoError(b, c.CreateTopic(topic, 1, nil))
}

func report(b *testing.B, start time.Time) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
	b.SetBytes(benchRecord)
}

func BenchmarkAppend(b *testing.B) {
	c, cfg := benchCluster(b)
	payload := make([]byte, benchRecord)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	ctx := context.Background()
	topicN := 0
	topic := func() string { topicN++; return fmt.Sprintf("bench-raw-%d", topicN) }

	b.Run("raw-async", func(b *testing.B) {
		cl := rawProducer(b, cfg)
		t := topic()
		createTopic(b, c, t)
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(b.N)
		for range b.N {
			cl.Produce(ctx, &kgo.Record{Topic: t, Value: payload}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
		report(b, start)
	})
	for _, k := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("raw-sync/appenders=%d", k), func(b *testing.B) {
			cl := rawProducer(b, cfg)
			t := topic()
			createTopic(b, c, t)
			b.ResetTimer()
			start := time.Now()
			walimplstest.Split(b.N, k, func(n int) {
				for range n {
					if err := cl.ProduceSync(ctx, &kgo.Record{Topic: t, Value: payload}).FirstErr(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b, start)
		})
		for _, txn := range []bool{true, false} {
			b.Run(fmt.Sprintf("wal/transactions=%t/appenders=%d", txn, k), func(b *testing.B) {
				wcfg := cfg
				wcfg.DisableTransactions = !txn
				o, err := New(ctx, wcfg)
				require.NoError(b, err)
				defer o.Close()
				w, err := o.Open(ctx, walimpls.Channel{Name: fmt.Sprintf("bench-%t-%d", txn, k), Term: 1})
				require.NoError(b, err)
				m := message.Restore(payload, nil)
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
				report(b, start)
			})
		}
	}
}

func BenchmarkScan(b *testing.B) {
	const records = 20000
	_, cfg := benchCluster(b)
	ctx := context.Background()
	o, err := New(ctx, cfg)
	require.NoError(b, err)
	defer o.Close()
	w, err := o.Open(ctx, walimpls.Channel{Name: "scan", Term: 1})
	require.NoError(b, err)
	payload := make([]byte, benchRecord)
	m := message.Restore(payload, map[string]string{"_k": "0", "_tt": "123456789"})
	walimplstest.Split(records, 16, func(n int) {
		for range n {
			if _, err := walimpls.Append(ctx, w, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	topic := o.cfg.topicName("scan")

	b.Run("raw", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.SeedBrokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
				kgo.FetchMaxBytes(DefaultReadAheadBytes), kgo.FetchMaxPartitionBytes(DefaultReadAheadBytes))
			require.NoError(b, err)
			n := 0
			for n < records {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(*kgo.Record) { n++ })
			}
			cl.Close()
		}
		b.ReportMetric(float64(b.N*records)/time.Since(start).Seconds(), "records/s")
	})
	b.Run("wal", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			s, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.All()})
			require.NoError(b, err)
			for range records {
				<-s.Chan()
			}
			_ = s.Close()
		}
		b.ReportMetric(float64(b.N*records)/time.Since(start).Seconds(), "records/s")
	})
}

// BenchmarkAppendAsync: one goroutine appending without waiting, up to 256
// appends in flight: franz-go's Produce (raw-async), the backend's
// AppendBatchAsync (wal-async), the adaptor's AppendAsync handing batches
// to it (adaptor-async), and the adaptor with the backend's asynchronous
// append hidden, a goroutine per append in flight (adaptor-goroutines);
// the adaptor only with transactions (without, it confirms every append
// by reading it back, on a goroutine per append either way).
func BenchmarkAppendAsync(b *testing.B) {
	c, cfg := benchCluster(b)
	ctx := context.Background()
	payload := make([]byte, benchRecord)
	const inflight = 256
	run := func(b *testing.B, appendOne func(done func(error))) {
		sem := make(chan struct{}, inflight)
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		wg.Add(b.N)
		for range b.N {
			sem <- struct{}{}
			appendOne(func(err error) {
				if err != nil {
					b.Error(err)
				}
				<-sem
				wg.Done()
			})
		}
		wg.Wait()
		report(b, start)
	}
	runs := 0 // a benchmark function runs more than once: one topic or channel each time
	b.Run("raw-async", func(b *testing.B) {
		cl := rawProducer(b, cfg)
		runs++
		topic := fmt.Sprintf("bench-async-raw-%d", runs)
		createTopic(b, c, topic)
		rec := func() *kgo.Record { return &kgo.Record{Topic: topic, Value: payload} }
		run(b, func(done func(error)) { cl.Produce(ctx, rec(), func(_ *kgo.Record, err error) { done(err) }) })
	})
	for _, txn := range []bool{true, false} {
		wcfg := cfg
		wcfg.DisableTransactions = !txn
		o := newOpener(b, wcfg)
		m := message.Restore(payload, nil)
		b.Run(fmt.Sprintf("wal-async/transactions=%t", txn), func(b *testing.B) {
			runs++
			w, err := o.Open(ctx, walimpls.Channel{Name: fmt.Sprintf("bench-async-wal-%t-%d", txn, runs), Term: 1})
			require.NoError(b, err)
			defer w.Close()
			aa := w.(walimpls.AsyncAppender)
			msgs := []message.Message{m}
			run(b, func(done func(error)) { aa.AppendBatchAsync(ctx, msgs, func(_ []message.ID, err error) { done(err) }) })
		})
		if !txn {
			continue // the adaptor confirms every append on a backend that cannot fence: no asynchronous path
		}
		for _, hide := range []bool{false, true} {
			name := "adaptor-async"
			var opener walimpls.Opener = o
			if hide {
				name, opener = "adaptor-goroutines", walimplstest.PlainOpener(o)
			}
			b.Run(fmt.Sprintf("%s/transactions=%t", name, txn), func(b *testing.B) {
				runs++
				w, err := adaptor.Open(ctx, opener, adaptor.Channel{Name: fmt.Sprintf("bench-%s-%d", name, runs), Term: 1},
					adaptor.Options{Logger: slog.New(slog.DiscardHandler), MaxInflightAppends: inflight})
				require.NoError(b, err)
				defer w.Close()
				run(b, func(done func(error)) { w.AppendAsync(ctx, m, func(_ adaptor.AppendResult, err error) { done(err) }) })
			})
		}
	}
}
