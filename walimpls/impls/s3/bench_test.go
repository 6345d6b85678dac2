package s3

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// The benchmarks report same-run ratios against the store itself (raw
// PUTs and GETs of objects of the size the backend writes), so that a
// figure says what the backend costs over the store, not how fast this
// machine is. go test -bench . -run '^$' ./walimpls/impls/s3/

// rawPuts PUTs n objects of size bytes with conc writers and returns how
// long each took.
func rawPuts(b *testing.B, o *Opener, n, size, conc int) (time.Duration, []time.Duration) {
	body := bytes.Repeat([]byte("r"), size)
	var (
		next atomic.Int64
		mu   sync.Mutex
		lat  []time.Duration
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				t0 := time.Now()
				_, err := o.st.put(context.Background(), reqPut, o.keys.probe(fmt.Sprintf("raw-%d-%d", time.Now().UnixNano(), i)), body, nil, putCond{createOnly: true})
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return time.Since(start), lat
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func benchConfig(st *testStore, interval time.Duration) Config {
	cfg := st.config(nil)
	cfg.FlushInterval = interval
	cfg.PollInterval = 0
	cfg.MaxAttempts = 0
	return cfg
}

// 16 appenders of 1 KiB messages on one channel, against raw PUTs of
// objects of the mean size the backend wrote, MaxInflight at once.
func BenchmarkAppendThroughput(b *testing.B) {
	st := newTestStore(b)
	cfg := benchConfig(st, 5*time.Millisecond)
	o := newOpener(b, cfg)
	payload := bytes.Repeat([]byte("p"), 1024)
	m, _ := message.New(payload, nil)
	const appenders, perAppender = 16, 200
	for b.Loop() {
		wal, err := o.Open(context.Background(), walimpls.Channel{Name: "tput", Term: 1})
		require.NoError(b, err)
		puts0 := counterValue(&testing.T{}, o.m.requests.WithLabelValues(reqPut, resOK))
		bytes0 := counterValue(&testing.T{}, o.m.putBytes)
		start := time.Now()
		var wg sync.WaitGroup
		for range appenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perAppender {
					if _, err := wal.Append(context.Background(), m); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		puts := counterValue(&testing.T{}, o.m.requests.WithLabelValues(reqPut, resOK)) - puts0
		objBytes := counterValue(&testing.T{}, o.m.putBytes) - bytes0
		_ = wal.Close()
		mean := int(objBytes / puts)
		rawElapsed, rawLat := rawPuts(b, o, int(puts), mean, cfg.withDefaults().MaxInflight)
		// What synchronous appenders can reach at best: each waits for
		// its flush, so appenders' messages per interval and PUT.
		bound := float64(appenders*len(payload)) / (cfg.FlushInterval + percentile(rawLat, 0.5)).Seconds() / (1 << 20)
		appendMBs := float64(appenders*perAppender*len(payload)) / elapsed.Seconds() / (1 << 20)
		rawMBs := float64(int(puts)*mean) / rawElapsed.Seconds() / (1 << 20)
		b.ReportMetric(appendMBs, "append-MiB/s")
		b.ReportMetric(rawMBs, "rawput-MiB/s")
		b.ReportMetric(appendMBs/rawMBs, "append/raw")
		b.ReportMetric(float64(mean), "object-bytes")
		b.ReportMetric(appendMBs/bound, "append/sync-bound")
	}
}

// One appender, one 1 KiB message at a time: append latency beside the
// flush interval and raw PUTs of the same object size.
func BenchmarkAppendLatency(b *testing.B) {
	st := newTestStore(b)
	interval := 5 * time.Millisecond
	o := newOpener(b, benchConfig(st, interval))
	payload := bytes.Repeat([]byte("l"), 1024)
	m, _ := message.New(payload, nil)
	for b.Loop() {
		w, err := o.Open(context.Background(), walimpls.Channel{Name: "lat", Term: 1})
		require.NoError(b, err)
		var lat []time.Duration
		for range 200 {
			t0 := time.Now()
			if _, err := w.Append(context.Background(), m); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		_ = w.Close()
		_, raw := rawPuts(b, o, 200, headerSize+recordFixed+len(payload)+crcSize, 1)
		b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
		b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
		b.ReportMetric(float64(interval.Microseconds()), "interval-µs")
		b.ReportMetric(float64(percentile(raw, 0.5).Microseconds()), "rawput-p50-µs")
		b.ReportMetric(float64(percentile(raw, 0.99).Microseconds()), "rawput-p99-µs")
		b.ReportMetric(float64((percentile(lat, 0.5) - interval).Microseconds()), "p50-minus-interval-µs")
	}
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

// Catching up on 500 objects with a scanner against GETting the same
// objects one after the other.
func BenchmarkCatchUpRead(b *testing.B) {
	st := newTestStore(b)
	cfg := benchConfig(st, time.Millisecond)
	cfg.FlushRecords = 4
	o := newOpener(b, cfg)
	payload := bytes.Repeat([]byte("c"), 4096)
	m, _ := message.New(payload, nil)
	w, err := o.Open(context.Background(), walimpls.Channel{Name: "catchup", Term: 1})
	require.NoError(b, err)
	var wg sync.WaitGroup
	const msgs = 2000
	for range msgs {
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
	reader := newOpener(b, cfg)
	r, err := reader.Open(context.Background(), walimpls.Channel{Name: "catchup", Mode: walimpls.ReadOnly})
	require.NoError(b, err)
	defer r.Close()
	objects := uint64(0)
	for ; ; objects++ {
		info, err := reader.headSlot(context.Background(), "catchup", 0, objects)
		require.NoError(b, err)
		if info.state != slotData {
			break
		}
	}
	for b.Loop() {
		t0 := time.Now()
		s, err := r.Read(context.Background(), walimpls.ReadOption{})
		require.NoError(b, err)
		for range msgs {
			<-s.Chan()
		}
		scan := time.Since(t0)
		_ = s.Close()
		t0 = time.Now()
		for slot := range objects {
			if _, _, err := reader.st.get(context.Background(), reader.keys.slot("catchup", 0, slot)); err != nil {
				b.Fatal(err)
			}
		}
		raw := time.Since(t0)
		b.ReportMetric(float64(objects), "objects")
		b.ReportMetric(scan.Seconds()/raw.Seconds(), "scan/rawget")
	}
}
