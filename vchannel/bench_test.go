package vchannel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/vchannel"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// BenchmarkReplay compares a fan-out replay with plain scanners on the same
// logs (goal: fan-out ≥ 0.8× the records/s of raw):
//
//	go test -run '^$' -bench Replay -benchtime 5x ./vchannel/
//
// 1,000 vchannels live on 16 pchannels of the local backend (vchannel i on
// pchannel i%16), filled first with 1 KiB records spread round-robin over
// each pchannel's vchannels. One op is one round of each side, alternating
// as adaptor/bench_test.go does because the machine is noisy:
//
//   - raw: 16 plain adaptor scanners, one per pchannel, each reading all of
//     its pchannel's data;
//   - fan-out: 16 Replayers, one per pchannel, serving all 1,000 vchannels
//     from the start, each vchannel read by a goroutine of its own.
//
// Both read from read-only WALs (no write-ahead buffer of the old log: all
// of it is read from the backend). It reports each side's records/s and
// CPU per record, their ratios, the consumers detached, and the read
// amplification of the fan-out: backend messages its scanners read over
// those the raw scanners read, measured in a last, untimed round of each
// through a counting opener.
func BenchmarkReplay(b *testing.B) {
	const (
		pchannels = 16
		vchannels = 1000
		perPCh    = 8192
		record    = 1 << 10
	)
	store, err := local.New(context.Background(), local.Config{Dir: b.TempDir(), Sync: local.SyncNone})
	require.NoError(b, err)
	b.Cleanup(func() { _ = store.Close() })
	layout := benchFill(b, store, pchannels, vchannels, perPCh, record)

	ws := openReadOnly(b, store, pchannels)
	var rawTook, fanTook benchCost
	var detached int
	b.SetBytes(2 * pchannels * perPCh * record)
	b.ResetTimer()
	for range b.N {
		rawTook.add(benchRaw(b, ws, "raw", perPCh))
		took, d := benchFanOut(b, ws, layout)
		fanTook.add(took)
		detached += d
	}
	b.StopTimer()

	// The amplification round, through a counting opener.
	counter := newReadCounter(false)
	counted := openReadOnly(b, counter.wrap(store), pchannels)
	benchRaw(b, counted, "raw", perPCh)
	_, d := benchFanOut(b, counted, layout)
	detached += d
	closeAll(b, counted)
	closeAll(b, ws)
	rawReads := counter.readsOf("raw")
	fanReads := counter.reads(func(name string) bool { return name != "raw" && !tailOrRecovery(name) })

	records := float64(b.N * pchannels * perPCh)
	rawRate, fanRate := records/rawTook.wall.Seconds(), records/fanTook.wall.Seconds()
	b.ReportMetric(rawRate, "raw-records/s")
	b.ReportMetric(fanRate, "fanout-records/s")
	b.ReportMetric(fanRate/rawRate, "ratio")
	b.ReportMetric(float64(rawTook.cpu.Nanoseconds())/records, "raw-cpu-ns/record")
	b.ReportMetric(float64(fanTook.cpu.Nanoseconds())/records, "fanout-cpu-ns/record")
	b.ReportMetric(rawTook.cpu.Seconds()/fanTook.cpu.Seconds(), "cpu-ratio")
	b.ReportMetric(float64(fanReads)/float64(rawReads), "amplification")
	b.ReportMetric(float64(detached), "detached")
}

// benchLayout is which vchannels live on each pchannel and how many
// records each holds.
type benchLayout struct {
	vcs   [][]string       // by pchannel
	count []map[string]int // by pchannel: records per vchannel
}

func pchName(i int) string { return fmt.Sprintf("pch-%02d", i) }

// benchFill appends perPCh records to every pchannel, round-robin over its
// vchannels through their views, from 4 goroutines per pchannel.
func benchFill(b *testing.B, o walimpls.Opener, pchannels, vchannels, perPCh, record int) benchLayout {
	l := benchLayout{vcs: make([][]string, pchannels), count: make([]map[string]int, pchannels)}
	for v := range vchannels {
		p := v % pchannels
		l.vcs[p] = append(l.vcs[p], fmt.Sprintf("vc-%04d", v))
	}
	ctx := context.Background()
	payload := make([]byte, record)
	var wg sync.WaitGroup
	var failed atomic.Error
	for p := range pchannels {
		w, err := adaptor.Open(ctx, o, adaptor.Channel{Name: pchName(p), Term: 1}, adaptor.Options{Logger: quiet()})
		require.NoError(b, err)
		views := make([]*vchannel.WAL, len(l.vcs[p]))
		l.count[p] = map[string]int{}
		for i, vc := range l.vcs[p] {
			views[i], err = vchannel.New(w, vc)
			require.NoError(b, err)
		}
		for i := range perPCh {
			l.count[p][l.vcs[p][i%len(views)]]++
		}
		var next atomic.Int64
		var pw sync.WaitGroup
		for range 4 {
			pw.Add(1)
			go func() {
				defer pw.Done()
				for i := next.Inc() - 1; i < int64(perPCh); i = next.Inc() - 1 {
					m, err := message.New(payload, nil)
					if err == nil {
						_, err = views[int(i)%len(views)].Append(ctx, m)
					}
					if err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pw.Wait()
			if err := w.Sync(ctx); err != nil {
				failed.Store(err)
			}
			if err := w.Close(); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	require.NoError(b, failed.Load())
	return l
}

func openReadOnly(b *testing.B, o walimpls.Opener, pchannels int) []adaptor.WAL {
	ws := make([]adaptor.WAL, pchannels)
	for p := range ws {
		w, err := adaptor.Open(context.Background(), o, adaptor.Channel{Name: pchName(p)},
			adaptor.Options{ReadOnly: true, Logger: quiet()})
		require.NoError(b, err)
		ws[p] = w
	}
	return ws
}

func closeAll(b *testing.B, ws []adaptor.WAL) {
	for _, w := range ws {
		require.NoError(b, w.Close())
	}
}

// benchRaw reads every pchannel's records with a plain scanner each,
// concurrently.
func benchRaw(b *testing.B, ws []adaptor.WAL, name string, perPCh int) benchCost {
	var wg sync.WaitGroup
	var failed atomic.Error
	took := measureCost(b, func() {
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := w.Read(context.Background(), adaptor.ReadOption{Name: name})
				if err != nil {
					failed.Store(err)
					return
				}
				defer s.Close()
				if err := count(s, perPCh); err != nil {
					failed.Store(err)
				}
			}()
		}
		wg.Wait()
	})
	require.NoError(b, failed.Load())
	return took
}

// benchFanOut replays every vchannel of every pchannel, a Replayer per
// pchannel and a reading goroutine per vchannel, and returns what it took
// and how many consumers were detached.
func benchFanOut(b *testing.B, ws []adaptor.WAL, l benchLayout) (benchCost, int) {
	var wg sync.WaitGroup
	var failed atomic.Error
	var detached atomic.Int64
	took := measureCost(b, func() {
		for p, w := range ws {
			consumers := make([]vchannel.Consumer, len(l.vcs[p]))
			for i, vc := range l.vcs[p] {
				consumers[i] = vchannel.Consumer{VChannel: vc}
			}
			r, err := vchannel.Replay(context.Background(), w, consumers, vchannel.ReplayOptions{Logger: quiet()})
			if err != nil {
				failed.Store(err)
				break
			}
			var rw sync.WaitGroup
			for _, vc := range l.vcs[p] {
				s, _ := r.Scanner(vc)
				rw.Add(1)
				go func() {
					defer rw.Done()
					if err := count(s, l.count[p][vc]); err != nil {
						failed.Store(err)
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rw.Wait()
				detached.Add(int64(r.Detachments()))
				_ = r.Close()
			}()
		}
		wg.Wait()
	})
	require.NoError(b, failed.Load())
	return took, int(detached.Load())
}

// count reads n messages from s, as a consumer's loop does: a receive
// each.
func count(s walimpls.Scanner, n int) error {
	for i := 0; i < n; i++ {
		if _, ok := <-s.Chan(); !ok {
			<-s.Done()
			return fmt.Errorf("scanner ended after %d of %d: %w", i, n, s.Error())
		}
	}
	return nil
}

// benchCost is what one side of a benchmark took.
type benchCost struct{ wall, cpu time.Duration }

func (c *benchCost) add(o benchCost) { c.wall += o.wall; c.cpu += o.cpu }

// measureCost runs f and returns its wall and process CPU time.
func measureCost(b *testing.B, f func()) benchCost {
	cpu0, wall0 := cpuTime(b), time.Now()
	f()
	return benchCost{wall: time.Since(wall0), cpu: cpuTime(b) - cpu0}
}

func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
