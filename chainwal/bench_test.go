package chainwal_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walmanager"
)

// BenchmarkCutover measures a planned migration's cutover on an embedded
// manager, under load: from the request (Migrate) to the first append
// acknowledged on the new backend, while an appender keeps appending to
// the channel (its appends at the old term fail over to the new WAL). Each
// iteration migrates back and forth between the pair; beside it, in the
// same run, a plain move (a new term on the same backend, the cheapest
// term bump there is) of another channel on the pair's first backend is
// measured the same way, as the baseline. It reports the percentiles of
// both and the ratio of p99s.
func BenchmarkCutover(b *testing.B) {
	for _, pair := range [][2]string{{"local", "kafka"}, {"kafka", "local"}, {"memory", "pulsar"}, {"local", "memory"}} {
		b.Run(pair[0]+"-"+pair[1], func(b *testing.B) {
			e := newEnv(b, pair[0], pair[1])
			o := e.opener(pair[0])
			m := e.manager(o)
			ctx := context.Background()
			var cut, move []time.Duration
			for i := 0; i < b.N; i++ {
				to := pair[(i+1)%2]
				cut = append(cut, cutover(b, m, "cut", func() {
					_, err := o.Migrate(ctx, m, "cut", to, "bench")
					require.NoError(b, err)
				}))
				move = append(move, cutover(b, m, "move", func() {
					term := termOf(m, "move")
					require.NoError(b, m.Open(ctx, adaptor.Channel{Name: "move", Term: term + 1}))
				}))
			}
			report(b, "cutover", cut)
			report(b, "move", move)
			if len(cut) > 0 {
				b.ReportMetric(float64(percentile(cut, 0.99))/float64(percentile(move, 0.99)), "p99-cutover/move")
			}
		})
	}
}

// cutover opens channel on m if it is not yet, keeps an appender on it,
// runs step and returns the time from step's start to the first append
// acknowledged at the new term.
func cutover(b testing.TB, m *walmanager.Manager, channel string, step func()) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	term := termOf(m, channel)
	if term == 0 {
		term = 1
		require.NoError(b, m.Open(ctx, adaptor.Channel{Name: channel, Term: 1}))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	acked := make(chan time.Time, 1)
	wg.Add(1)
	go func() { // the load, and the first append at the new term
		defer wg.Done()
		msg, _ := message.New([]byte("load"), nil)
		for {
			select {
			case <-stop:
				return
			default:
			}
			served := false
			for t := term; t <= term+1; t++ {
				w, err := m.GetAvailableWAL(adaptor.Channel{Name: channel, Term: t})
				if err != nil {
					continue
				}
				served = true
				if _, err := w.Append(ctx, msg); err == nil && t == term+1 {
					select {
					case acked <- time.Now():
					default:
					}
					return
				}
			}
			if !served {
				// No WAL at either term (the cutover is under way): back
				// off as a client would, instead of spinning on a core the
				// cutover needs.
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	start := time.Now()
	step()
	var took time.Duration
	select {
	case at := <-acked:
		took = at.Sub(start)
	case <-ctx.Done():
		b.Fatal("no append acknowledged at the new term")
	}
	close(stop)
	wg.Wait()
	return took
}

func termOf(m *walmanager.Manager, channel string) int64 {
	for _, s := range m.Channels() {
		if s.Name == channel {
			return s.Term
		}
	}
	return 0
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func report(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	b.ReportMetric(float64(percentile(ds, 0.5))/1e6, name+"-p50-ms")
	b.ReportMetric(float64(percentile(ds, 0.99))/1e6, name+"-p99-ms")
}

// BenchmarkMigrateMany migrates 1,000 channels from local to Kafka on one
// embedded manager, 16 at a time, while appenders keep appending to a
// tenth of them; then reads every channel back and checks that each
// acknowledged append is there once, in timetick order across the seal,
// beside nothing but appends whose outcome was unknown (readAcked: an
// append in flight when the manager closes the old term's WAL fails with
// ErrClosed, yet may have been stored before the fence, and is then
// delivered). It reports the total time of the migration, the appends
// acknowledged during it, how many appends of unknown outcome were
// delivered, and, as the baseline measured in the same run on the same
// broker, the time to open 1,000 new channels on Kafka the same way (a
// migration's new segment is such an open, and its fence and seal come on
// top).
func BenchmarkMigrateMany(b *testing.B) {
	migrateMany(b, "local", "kafka", 1000)
}

// BenchmarkMigrateKafkaToS3 is BenchmarkMigrateMany for 100 channels from
// Kafka (kfake) to object storage (gofakes3), the move off brokers.
func BenchmarkMigrateKafkaToS3(b *testing.B) {
	migrateMany(b, "kafka", "s3", 100)
}

func migrateMany(b *testing.B, from, to string, channels int) {
	const parallel = 16
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newEnv(b, from, to)
		o := e.opener(from)
		m := e.manager(o)
		ctx := context.Background()
		names := make([]string, channels)
		for c := range names {
			names[c] = fmt.Sprintf("ch%04d", c)
			require.NoError(b, m.Open(ctx, adaptor.Channel{Name: names[c], Term: 1}))
		}
		logs := make([]*log, channels)
		for c := range logs {
			logs[c] = &log{}
		}
		stop := make(chan struct{})
		var load sync.WaitGroup
		for c := 0; c < channels; c += 10 {
			load.Add(1)
			go func() {
				defer load.Done()
				appendUntil(b, m, names[c], logs[c], stop)
			}()
		}
		b.StartTimer()
		took := inParallel(names, parallel, func(name string) {
			_, err := o.Migrate(ctx, m, name, to, "bench")
			require.NoError(b, err)
		})
		b.StopTimer()
		ko := e.opener(to)
		mk := e.manager(ko)
		opened := inParallel(names, parallel, func(name string) {
			require.NoError(b, mk.Open(ctx, adaptor.Channel{Name: "new-" + name, Term: 1}))
		})
		b.ReportMetric(opened.Seconds(), "open-all-s")
		b.ReportMetric(took.Seconds()/opened.Seconds(), "migrate/open")
		close(stop)
		load.Wait()
		acked, unknown := 0, 0
		for c, name := range names {
			if len(logs[c].acked) == 0 {
				continue
			}
			acked += len(logs[c].acked)
			w, err := m.GetAvailableWAL(adaptor.Channel{Name: name, Term: 2})
			require.NoError(b, err)
			unknown += readAcked(b, w, logs[c])
		}
		b.ReportMetric(took.Seconds(), "migrate-all-s")
		b.ReportMetric(float64(acked), "appends-acked")
		b.ReportMetric(float64(unknown), "unknown-delivered")
		b.ReportMetric(0, "lost")
		require.NoError(b, m.Close(ctx))
	}
}

// appendUntil appends to channel at whatever term it has, until stop,
// recording in l each append acknowledged and each one failed.
func appendUntil(b testing.TB, m *walmanager.Manager, channel string, l *log, stop <-chan struct{}) {
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		w, err := m.GetAvailableWAL(adaptor.Channel{Name: channel, Term: termOf(m, channel)})
		if err != nil {
			time.Sleep(time.Millisecond) // the channel is moving: back off
			continue
		}
		p := fmt.Sprintf("%s/%d", channel, i)
		msg, _ := message.New([]byte(p), nil)
		r, err := w.Append(ctx, msg)
		if err != nil {
			l.fail(p, err)
			continue
		}
		l.add(r, p)
	}
}

// inParallel runs f on every name, parallel at a time, and returns how
// long it took.
func inParallel(names []string, parallel int, f func(name string)) time.Duration {
	start := time.Now()
	work := make(chan string)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				f(name)
			}
		}()
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	return time.Since(start)
}
