package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// releaseBench is one node owning one channel, appenders writing to it
// through the API and a consumer tailing it, which commits what it read
// while commits are on.
type releaseBench struct {
	b   *testing.B
	ctx context.Context
	api streamwalv1connect.WALServiceClient

	appended atomic.Int64 // appends acknowledged
	// The consumer's read: every message's timetick and checkpoint, in
	// order, and how many it read.
	mu    sync.Mutex
	tts   []uint64
	cps   []string
	read  int
	stats struct{ committed, refused int }
}

const (
	benchChannel = "bench"
	benchPayload = 1 << 10
	benchWriters = 8
)

func newReleaseBench(b *testing.B, kind string) *releaseBench {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	e := newConsumersEnv(b, kind)
	if kind == local.Name {
		// The local backend as a node runs it, syncing every append
		// (backendstest's syncs nothing): a truncation's sync then shares
		// the appends' group commit, as it does in production.
		o, err := local.New(context.Background(), local.Config{Dir: b.TempDir()})
		require.NoError(b, err)
		b.Cleanup(func() { _ = o.Close() })
		e.b.Put(kind, kind, o)
	}
	n := e.node("n1", retention.Config{CommitDelay: 20 * time.Millisecond, Interval: time.Hour})
	e.c.assign(benchChannel, "n1", 1)
	r := &releaseBench{b: b, ctx: ctx, api: apiClient(n)}
	for range benchWriters {
		go r.appender()
	}
	go r.consume()
	return r
}

// appender appends until the bench ends.
func (r *releaseBench) appender() {
	payload := make([]byte, benchPayload)
	for r.ctx.Err() == nil {
		_, err := r.api.Append(r.ctx, connect.NewRequest(&streamwalv1.AppendRequest{Channel: benchChannel,
			Message: &streamwalv1.Message{Payload: payload}}))
		if err == nil {
			r.appended.Inc()
		}
	}
}

// consume tails the channel, noting each message.
func (r *releaseBench) consume() {
	stream, err := r.api.Read(r.ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: benchChannel,
		Start: &streamwalv1.ReadRequest_Latest{Latest: true}}))
	if err != nil {
		return
	}
	for stream.Receive() {
		r.mu.Lock()
		for _, d := range stream.Msg().GetMessages() {
			r.tts = append(r.tts, d.GetTimetick())
			r.cps = append(r.cps, d.GetCheckpoint())
			r.read++
		}
		r.mu.Unlock()
	}
}

// commit commits the last checkpoint read, and returns its index.
func (r *releaseBench) commit() int {
	r.mu.Lock()
	i := len(r.cps) - 1
	cp := ""
	if i >= 0 {
		cp = r.cps[i]
	}
	r.mu.Unlock()
	if cp == "" {
		return -1
	}
	_, err := r.api.Commit(r.ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: benchChannel, Consumer: "bench", Checkpoint: cp}))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.stats.refused++
		if r.stats.refused < 3 {
			r.b.Logf("commit refused: %v", err)
		}
		return -1
	}
	r.stats.committed++
	return i
}

// rate runs for d, committing every commitEvery (0: never), and returns
// the appends acknowledged per second meanwhile.
func (r *releaseBench) rate(d, commitEvery time.Duration) float64 {
	start, n := time.Now(), r.appended.Load()
	if commitEvery == 0 {
		time.Sleep(d) // a measuring period, not a wait for an event
	} else {
		for time.Since(start) < d {
			time.Sleep(commitEvery) // the consumer's commit period
			r.commit()
		}
	}
	return float64(r.appended.Load()-n) / time.Since(start).Seconds()
}

// BenchmarkTruncationCost measures what releasing the log costs the
// appends: appenders (8, 1 KiB each, through the API) and a consumer
// tailing the channel, in periods that alternate between the consumer not
// committing (the retainer has nothing to do) and committing every 100 ms
// or every second (the owner truncates after each: a watermark, a read of
// what is new, two store reads, the floor, a truncation). It reports the
// appends/s of each and their ratio with the retainer running ÷ without,
// the median of the pairs' (goal ≥ 0.95). The etcd that holds the
// checkpoints runs in the same process, on the same disk as the local
// backend: its fsyncs (a commit and a floor per round) are part of the
// cost here, as they would not be with etcd on machines of its own.
//
//	go test -run '^$' -bench TruncationCost -benchtime 1x ./node/
func BenchmarkTruncationCost(b *testing.B) {
	for _, kind := range []string{"local", "kafka"} {
		for _, every := range []time.Duration{100 * time.Millisecond, time.Second} {
			b.Run(fmt.Sprintf("%s/commit-every-%s", kind, every), func(b *testing.B) {
				r := newReleaseBench(b, kind)
				const pairs = 6
				period := max(1500*time.Millisecond, 2*every)
				r.rate(period, 0) // warm up: connections, the tail
				var on, off, ratios []float64
				b.ResetTimer()
				for range b.N {
					for p := range pairs {
						// Alternate who goes first: a drift of the machine hits both.
						var a, c float64
						if p%2 == 0 {
							a = r.rate(period, 0)
							c = r.rate(period, every)
						} else {
							c = r.rate(period, every)
							a = r.rate(period, 0)
						}
						off, on, ratios = append(off, a), append(on, c), append(ratios, c/a)
					}
				}
				b.StopTimer()
				b.ReportMetric(median(off), "appends/s-without")
				b.ReportMetric(median(on), "appends/s-with")
				b.ReportMetric(median(ratios), "pruner-ratio")
				r.mu.Lock()
				b.Logf("%s, a commit every %s: appends/s without the retainer's work %.0f, with it %.0f (median of %d pairs); ratio median %.3f, min %.3f, max %.3f; %d commits, %d refused",
					kind, every, median(off), median(on), pairs, median(ratios), slices.Min(ratios), slices.Max(ratios), r.stats.committed, r.stats.refused)
				r.mu.Unlock()
			})
		}
	}
}

// BenchmarkRetainedBytes measures what a channel retains under steady load
// with a consumer committing every second: every 250 ms, the messages a
// read from the oldest retained one delivers up to the tail (what the log
// holds, whatever the backend's own accounting), against the consumer's
// lag: the messages appended after its committed checkpoint. Messages are
// all of one size, so the ratio is one of bytes too. Goal: retained ≤ 2 ×
// the lag.
//
//	go test -run '^$' -bench RetainedBytes -benchtime 1x ./node/
func BenchmarkRetainedBytes(b *testing.B) {
	for _, kind := range []string{"local", "kafka"} {
		b.Run(kind, func(b *testing.B) {
			r := newReleaseBench(b, kind)
			r.rate(time.Second, 0) // warm up
			committed := -1        // index in the consumer's read of the committed checkpoint
			var ratios []float64
			var worst float64
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				lastCommit := time.Time{}
				for time.Since(start) < 12*time.Second {
					if time.Since(lastCommit) >= time.Second {
						if i := r.commit(); i >= 0 {
							committed = i
						}
						lastCommit = time.Now()
					}
					time.Sleep(250 * time.Millisecond) // the sampling period
					if committed < 0 {
						continue
					}
					retained, tail := r.retained()
					r.mu.Lock()
					lag := 0
					for _, tt := range r.tts[committed+1:] {
						if tt <= tail {
							lag++
						}
					}
					r.mu.Unlock()
					if lag == 0 {
						continue
					}
					ratio := float64(retained) / float64(lag)
					if ratio > 2 {
						b.Logf("sample over 2: retained %d, lag %d, %s after the commit", retained, lag, time.Since(lastCommit).Round(time.Millisecond))
					}
					ratios = append(ratios, ratio)
					worst = max(worst, ratio)
				}
			}
			b.StopTimer()
			require.NotEmpty(b, ratios)
			b.ReportMetric(median(ratios), "retained/lag-median")
			b.ReportMetric(worst, "retained/lag-max")
			b.Logf("%s: retained ÷ messages appended during the consumer's lag, %d samples: median %.2f, max %.2f (goal ≤ 2)",
				kind, len(ratios), median(ratios), worst)
		})
	}
}

// retained counts the data messages the log holds, read from the oldest
// up to the tail, and returns the tail's timetick (the last one's).
func (r *releaseBench) retained() (int, uint64) {
	stream, err := r.api.Read(r.ctx, connect.NewRequest(&streamwalv1.ReadRequest{Channel: benchChannel, UntilCaughtUp: true, Batch: 1000}))
	require.NoError(r.b, err)
	n, last := 0, uint64(0)
	for stream.Receive() {
		for _, d := range stream.Msg().GetMessages() {
			n++
			last = max(last, d.GetTimetick())
		}
	}
	require.NoError(r.b, stream.Err())
	return n, last
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
