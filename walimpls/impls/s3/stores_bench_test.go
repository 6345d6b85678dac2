package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// The benchmarks of this file run on every store of s3test.Stores
// (gofakes3 in the process, versitygw in its own) and report same-run
// ratios against the store itself, measured with the SDK's own client:
//
//	go test -bench Stores -run '^$' ./walimpls/impls/s3/

// storeBench is an Opener on a store with a registry of its own, and the
// store's raw client.
type storeBench struct {
	store *s3test.Store
	cfg   s3.Config
	o     *s3.Opener
	reg   *prometheus.Registry
	raw   *awss3.Client
}

var benchPrefixes atomic.Int64

func newStoreBench(b *testing.B, store *s3test.Store, mod func(*s3.Config)) *storeBench {
	cfg := store.Config(fmt.Sprintf("bench-%d/", benchPrefixes.Add(1)))
	if mod != nil {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	o, err := s3.New(context.Background(), cfg, walimpls.WithRegisterer(reg))
	require.NoError(b, err)
	b.Cleanup(func() { _ = o.Close() })
	return &storeBench{store: store, cfg: cfg, o: o, reg: reg, raw: store.Client(b)}
}

// counter sums the samples of the counter name whose labels include
// want.
func (sb *storeBench) counter(b *testing.B, name string, want map[string]string) float64 {
	mfs, err := sb.reg.Gather()
	require.NoError(b, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				if !hasLabel(m, k, v) {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

func (sb *storeBench) puts(b *testing.B) float64 {
	return sb.counter(b, "streamwal_s3_requests_total", map[string]string{"kind": "put", "result": "ok"})
}

func (sb *storeBench) putBytes(b *testing.B) float64 {
	return sb.counter(b, "streamwal_s3_put_bytes_total", nil)
}

// rawMeta is user metadata of the shape the backend puts on a flush (kind,
// term, count, nonce), so that the raw PUTs cost the store what a flush's
// does.
var rawMeta = map[string]string{"streamwal-kind": "data", "streamwal-term": "1765000000000000000",
	"streamwal-count": "4000", "streamwal-nonce": "00112233445566778899aabbccddeeff"}

// rawPuts PUTs n create-only objects of size bytes, conc at a time, each
// after a pause of gap (none for 0), with the SDK's client, and returns
// the time it took and each PUT's latency.
//
// The bodies are distinct buffers, 64 MiB of them or one per PUT when
// fewer, taken in turn: as much memory as the appenders' payloads in the
// throughput benchmark, so that neither side is measured from a cache the
// other does not have.
func (sb *storeBench) rawPuts(b *testing.B, n, size, conc int, gap time.Duration) (time.Duration, []time.Duration) {
	bodies := make([][]byte, min(n, max(1, distinctBytes/size)))
	for i := range bodies {
		bodies[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	run := benchPrefixes.Add(1)
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
				if gap > 0 {
					time.Sleep(gap) // pacing, not waiting for anything
				}
				t0 := time.Now()
				_, err := sb.raw.PutObject(context.Background(), &awss3.PutObjectInput{
					Bucket:      aws.String(sb.cfg.Bucket),
					Key:         aws.String(fmt.Sprintf("%sraw/%d/%d", sb.cfg.Prefix, run, i)),
					Body:        bytes.NewReader(bodies[int(i)%len(bodies)]),
					IfNoneMatch: aws.String("*"),
					Metadata:    rawMeta,
				})
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

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func forEachStore(b *testing.B, f func(b *testing.B, store *s3test.Store)) {
	for _, store := range s3test.Stores(b) {
		b.Run(store.Name, func(b *testing.B) { f(b, store) })
	}
}

// distinctBytes is how much distinct memory the appends' payloads and the
// raw PUTs' bodies of a benchmark span.
const distinctBytes = 64 << 20

// payloads returns messages of size bytes whose payloads are distinct
// buffers, spanning distinctBytes (at least one message).
func payloads(size int) []message.Message {
	ms := make([]message.Message, max(1, distinctBytes/size))
	for i := range ms {
		ms[i], _ = message.New(bytes.Repeat([]byte{byte(i)}, size), nil)
	}
	return ms
}

// appendAsync appends n messages through w, taken in turn from ms, each
// of appenders keeping up to window appends in flight, and returns when
// all are acknowledged.
func appendAsync(b *testing.B, w walimpls.WALImpl, ms []message.Message, appenders, n, window int) {
	aa, ok := w.(walimpls.AsyncAppender)
	require.True(b, ok)
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, window)
			var mine sync.WaitGroup
			// One callback for all of this appender's appends, and batches
			// made up front: the harness's own allocations are not the
			// backend's.
			done := func(_ []message.ID, err error) {
				if err != nil {
					b.Error(err)
				}
				<-slots
				mine.Done()
			}
			batches := make([][]message.Message, len(ms))
			for i := range batches {
				batches[i] = ms[i : i+1 : i+1]
			}
			next := g * len(ms) / appenders
			for range n / appenders {
				slots <- struct{}{}
				mine.Add(1)
				aa.AppendBatchAsync(context.Background(), batches[next], done)
				next = (next + 1) % len(ms)
			}
			mine.Wait()
		}()
	}
	wg.Wait()
}

// 16 appenders of 1 KiB messages (64 MiB of distinct payloads, taken in
// turn), each keeping 4,096 appends in flight (64 MiB in all, the
// default MaxBufferedBytes), on one channel at the default flush bounds
// but for a 20 ms interval (at 200 ms, the run's last, partial object
// waits out most of the interval, which a finite run counts and a steady
// stream does not): append throughput against raw create-only PUTs of
// objects of the mean size the backend wrote (64 MiB of distinct bodies),
// as many at once as the writer's MaxInflight, with a flush's metadata.
// Five rounds alternate appends and raw PUTs (128 MiB each); append/raw
// is the median of the rounds' ratios, so that a burst of load from
// elsewhere on the machine hits one round, not the figure. Also PUTs per
// MiB written.
func BenchmarkStoresAppendThroughput(b *testing.B) {
	forEachStore(b, func(b *testing.B, store *s3test.Store) {
		sb := newStoreBench(b, store, func(c *s3.Config) { c.FlushInterval = 20 * time.Millisecond })
		ms := payloads(1024)
		const appenders, total, window, rounds = 16, 128 << 10, 4096, 5 // 128 MiB a round, 64 MiB in flight
		for b.Loop() {
			var (
				ratios                      []float64
				appendSecs, rawSecs         float64
				allPuts, allBytes, rawBytes float64
			)
			for range rounds {
				w, err := sb.o.Open(context.Background(), walimpls.Channel{Name: "tput", Term: time.Now().UnixNano()})
				require.NoError(b, err)
				puts0, bytes0 := sb.puts(b), sb.putBytes(b)
				start := time.Now()
				appendAsync(b, w, ms, appenders, total, window)
				elapsed := time.Since(start)
				puts, objBytes := sb.puts(b)-puts0, sb.putBytes(b)-bytes0
				require.NoError(b, w.Close())
				mean := int(objBytes / puts)
				rawN := max(8, int(puts))
				rawElapsed, _ := sb.rawPuts(b, rawN, mean, s3.DefaultMaxInflight, 0)
				ratios = append(ratios, (float64(total*1024)/elapsed.Seconds())/(float64(rawN*mean)/rawElapsed.Seconds()))
				appendSecs, rawSecs = appendSecs+elapsed.Seconds(), rawSecs+rawElapsed.Seconds()
				allPuts, allBytes, rawBytes = allPuts+puts, allBytes+objBytes, rawBytes+float64(rawN*mean)
			}
			appendMBs := float64(rounds*total*1024) / appendSecs / (1 << 20)
			rawMBs := rawBytes / rawSecs / (1 << 20)
			slices.Sort(ratios)
			b.ReportMetric(appendMBs, "append-MiB/s")
			b.ReportMetric(rawMBs, "rawput-MiB/s")
			b.ReportMetric(ratios[len(ratios)/2], "append/raw")
			b.ReportMetric(appendMBs/rawMBs, "overall-append/raw")
			b.ReportMetric(allBytes/allPuts, "object-bytes")
			b.ReportMetric(allPuts/float64(rounds*total/1024), "PUTs/MiB")
		}
	})
}

// One appender, 300 appends of one 1 KiB message at a time (so that p99
// is not the one slowest), at a flush interval of 20 ms: append latency
// p50/p99 beside the interval plus raw PUT p50/p99 of objects of its size
// (the goal: p99 ≤ interval + 1.5 × raw p99). Raw PUTs are measured twice:
// back to back, and one per interval, as the appender's flushes come (a
// PUT after 20 ms of quiet costs the store and the client more than one
// in a stream: waking the goroutines of both ends; the ratio is reported
// against each). Appends and paced raw PUTs alternate in three rounds.
func BenchmarkStoresAppendLatency(b *testing.B) {
	const interval, latencySamples, latencyRounds = 20 * time.Millisecond, 300, 3
	forEachStore(b, func(b *testing.B, store *s3test.Store) {
		sb := newStoreBench(b, store, func(c *s3.Config) { c.FlushInterval = interval })
		m, _ := message.New(bytes.Repeat([]byte("l"), 1024), nil)
		for b.Loop() {
			w, err := sb.o.Open(context.Background(), walimpls.Channel{Name: "lat", Term: time.Now().UnixNano()})
			require.NoError(b, err)
			bytes0, puts0 := sb.putBytes(b), sb.puts(b)
			// Three rounds alternate appends and paced raw PUTs, so that
			// both see the process and the store in the same state.
			var (
				lat, paced []time.Duration
				size       int // the mean object the appends wrote
			)
			for range latencyRounds {
				for range latencySamples / latencyRounds {
					t0 := time.Now()
					_, err := walimpls.Append(context.Background(), w, m)
					require.NoError(b, err)
					lat = append(lat, time.Since(t0))
				}
				size = int((sb.putBytes(b) - bytes0) / (sb.puts(b) - puts0))
				_, p := sb.rawPuts(b, latencySamples/latencyRounds, size, 1, interval)
				paced = append(paced, p...)
			}
			require.NoError(b, w.Close())
			_, raw := sb.rawPuts(b, latencySamples, size, 1, 0)
			p99, rawP99, pacedP99 := pct(lat, 0.99), pct(raw, 0.99), pct(paced, 0.99)
			b.ReportMetric(float64(pct(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			b.ReportMetric(float64(pct(raw, 0.5).Microseconds()), "rawput-p50-µs")
			b.ReportMetric(float64(rawP99.Microseconds()), "rawput-p99-µs")
			b.ReportMetric(float64(pct(paced, 0.5).Microseconds()), "paced-rawput-p50-µs")
			b.ReportMetric(float64(pacedP99.Microseconds()), "paced-rawput-p99-µs")
			// ≤ 1 meets the goal.
			b.ReportMetric(float64(p99)/float64(interval+rawP99*3/2), "p99/(interval+1.5rawp99)")
			b.ReportMetric(float64(p99)/float64(interval+pacedP99*3/2), "p99/(interval+1.5paced-rawp99)")
		}
	})
}

// Opening (read-write, so fencing and finding the tail) a channel of
// 1 GiB against one of 10 MiB, both written in 1 MiB objects: time and
// requests.
func BenchmarkStoresOpenBigLog(b *testing.B) {
	forEachStore(b, func(b *testing.B, store *s3test.Store) {
		sb := newStoreBench(b, store, func(c *s3.Config) { c.FlushBytes = 1 << 20 })
		m, _ := message.New(bytes.Repeat([]byte("o"), 64<<10), nil)
		fill := func(name string, mib int) {
			w, err := sb.o.Open(context.Background(), walimpls.Channel{Name: name, Term: 1})
			require.NoError(b, err)
			appendAsync(b, w, []message.Message{m}, 4, mib*16, 64)
			require.NoError(b, w.Close())
		}
		fill("big", 1024)
		fill("small", 10)
		requests := func() float64 { return sb.counter(b, "streamwal_s3_requests_total", nil) }
		term := int64(1)
		open := func(name string) (float64, time.Duration) {
			r0 := requests()
			t0 := time.Now()
			w, err := sb.o.Open(context.Background(), walimpls.Channel{Name: name, Term: term})
			require.NoError(b, err)
			d := time.Since(t0)
			r := requests() - r0
			require.NoError(b, w.Close())
			return r, d
		}
		for b.Loop() {
			term++
			bigReq, bigT := open("big")
			smallReq, smallT := open("small")
			b.ReportMetric(bigReq, "big-requests")
			b.ReportMetric(smallReq, "small-requests")
			b.ReportMetric(bigT.Seconds()/smallT.Seconds(), "big/small-time")
		}
	})
}

// A scanner catching up on 64 MiB written in 1 MiB objects, against GETs
// of the same objects one after the other with the SDK's client
// (throughput ratio: ≥ 0.8 is the goal).
func BenchmarkStoresCatchUpRead(b *testing.B) {
	forEachStore(b, func(b *testing.B, store *s3test.Store) {
		sb := newStoreBench(b, store, func(c *s3.Config) { c.FlushBytes = 1 << 20 })
		m, _ := message.New(bytes.Repeat([]byte("c"), 16<<10), nil)
		const msgs = 4096 // 64 MiB
		w, err := sb.o.Open(context.Background(), walimpls.Channel{Name: "catchup", Term: 1})
		require.NoError(b, err)
		appendAsync(b, w, []message.Message{m}, 4, msgs, 64)
		require.NoError(b, w.Close())
		reader, err := s3.New(context.Background(), sb.cfg)
		require.NoError(b, err)
		defer reader.Close()
		r, err := reader.Open(context.Background(), walimpls.Channel{Name: "catchup", Mode: walimpls.ReadOnly})
		require.NoError(b, err)
		defer r.Close()
		// The channel's objects, as a client that is not the backend finds
		// them.
		var keys []string
		pages := awss3.NewListObjectsV2Paginator(sb.raw, &awss3.ListObjectsV2Input{Bucket: aws.String(sb.cfg.Bucket), Prefix: aws.String(sb.cfg.Prefix)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(context.Background())
			require.NoError(b, err)
			for _, obj := range page.Contents {
				if aws.ToInt64(obj.Size) > 1<<19 {
					keys = append(keys, aws.ToString(obj.Key))
				}
			}
		}
		require.NotEmpty(b, keys)
		for b.Loop() {
			t0 := time.Now()
			s, err := r.Read(context.Background(), walimpls.ReadOption{})
			require.NoError(b, err)
			for range msgs {
				<-s.Chan()
			}
			scan := time.Since(t0)
			require.NoError(b, s.Close())
			t0 = time.Now()
			var buf bytes.Buffer
			for _, k := range keys {
				out, err := sb.raw.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String(sb.cfg.Bucket), Key: aws.String(k)})
				require.NoError(b, err)
				buf.Reset()
				_, err = buf.ReadFrom(out.Body)
				require.NoError(b, err)
				_ = out.Body.Close()
			}
			raw := time.Since(t0)
			b.ReportMetric(float64(len(keys)), "objects")
			b.ReportMetric(raw.Seconds()/scan.Seconds(), "scan/rawget-throughput")
		}
	})
}
