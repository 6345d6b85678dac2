package s3

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// The in-package benchmarks count what only the backend's own metrics and
// transport see (PUTs per MiB, the requests of an open); throughput,
// latency and catch-up, as same-run ratios against the store itself on
// every test store, are in stores_bench_test.go.
// go test -bench . -run '^$' ./walimpls/impls/s3/

func benchConfig(st *testStore, interval time.Duration) Config {
	cfg := st.config(nil)
	cfg.FlushInterval = interval
	cfg.PollInterval = 0
	cfg.MaxAttempts = 0
	return cfg
}

// PUTs per MiB written at the defaults, by appenders that keep the writer
// busy (asynchronous 1 KiB appends).
func BenchmarkPutsPerMiB(b *testing.B) {
	st := newTestStore(b)
	cfg := st.config(nil)
	cfg.FlushInterval, cfg.PollInterval, cfg.MaxAttempts = 0, 0, 0 // the defaults
	o := newOpener(b, cfg)
	payload := bytes.Repeat([]byte("d"), 1024)
	m, _ := message.New(payload, nil)
	const mib = 32
	for b.Loop() {
		w, err := o.Open(context.Background(), walimpls.Channel{Name: "perMiB", Term: 1})
		require.NoError(b, err)
		puts0 := counterValue(&testing.T{}, o.m.requests.WithLabelValues(reqPut, resOK))
		var wg sync.WaitGroup
		batch := make([]message.Message, 64)
		for i := range batch {
			batch[i] = m
		}
		for range mib * 1024 / len(batch) {
			wg.Add(1)
			w.(walimpls.AsyncAppender).AppendBatchAsync(context.Background(), batch, func(_ []message.ID, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
		puts := counterValue(&testing.T{}, o.m.requests.WithLabelValues(reqPut, resOK)) - puts0
		_ = w.Close()
		b.ReportMetric(puts/mib, "PUTs/MiB")
	}
}

// Opening a channel of 2,000 objects against one of 10: the requests (and
// time) the seal's tail search takes do not grow with the log.
func BenchmarkOpenBigLog(b *testing.B) {
	st := newTestStore(b)
	var cnt *counter
	cfg := benchConfig(st, time.Millisecond)
	cfg.HTTPClient = &http.Client{Transport: func() http.RoundTripper { cnt = newCounter(st.base); return cnt }()}
	cfg.FlushRecords = 1
	o := newOpener(b, cfg)
	m, _ := message.New([]byte("x"), nil)
	fill := func(name string, n int) {
		w, err := o.Open(context.Background(), walimpls.Channel{Name: name, Term: 1})
		require.NoError(b, err)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			w.(walimpls.AsyncAppender).AppendBatchAsync(context.Background(), []message.Message{m}, func(_ []message.ID, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
		_ = w.Close()
	}
	fill("big", 2000)
	fill("small", 10)
	term := int64(1)
	open := func(name string) (int, time.Duration) {
		cnt.reset()
		t0 := time.Now()
		w, err := o.Open(context.Background(), walimpls.Channel{Name: name, Term: term})
		require.NoError(b, err)
		d := time.Since(t0)
		_ = w.Close()
		return cnt.total(), d
	}
	for b.Loop() {
		term++
		bigReq, bigT := open("big")
		smallReq, smallT := open("small")
		b.ReportMetric(float64(bigReq), "big-requests")
		b.ReportMetric(float64(smallReq), "small-requests")
		b.ReportMetric(float64(bigReq)/float64(smallReq), "big/small-requests")
		b.ReportMetric(bigT.Seconds()/smallT.Seconds(), "big/small-time")
	}
}
