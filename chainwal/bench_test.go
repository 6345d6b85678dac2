package chainwal_test

import (
	"context"
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
func cutover(b *testing.B, m *walmanager.Manager, channel string, step func()) time.Duration {
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
