// Command walbench runs a streaming node's main job on one node: it builds
// the configured backend (the embedded local backend by default), opens
// channels through the manager, appends from many goroutines while a
// scanner per channel tails them, checks that every acknowledged message was
// delivered exactly once in timetick order, truncates what it wrote, and
// prints throughput and latency.
//
//	go run ./cmd/walbench                      # local backend in ./streamwal-data
//	go run ./cmd/walbench -config node.yaml    # any backend (see package selector)
//	go run ./cmd/walbench -cluster http://127.0.0.1:2379   # through the client, against running walnodes
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/selector"
	"github.com/streamwal/streamwal/walmanager"
)

type params struct {
	config    string
	dir       string
	channels  int
	appenders int
	records   int
	size      int
	term      int64
	verbose   bool
	cluster   string // etcd endpoints of a running cluster: cluster mode
	root      string
}

func main() {
	var p params
	flag.StringVar(&p.config, "config", "", "YAML configuration (default: the local backend in -dir)")
	flag.StringVar(&p.dir, "dir", selector.DefaultLocalDir, "directory of the local backend when no -config is given")
	flag.IntVar(&p.channels, "channels", 4, "channels to open")
	flag.IntVar(&p.appenders, "appenders", 16, "concurrent appenders per channel")
	flag.IntVar(&p.records, "records", 20000, "records to append per channel")
	flag.IntVar(&p.size, "size", 1024, "payload bytes per record")
	flag.Int64Var(&p.term, "term", time.Now().Unix(), "term to open the channels at (a later run must use a higher one)")
	flag.BoolVar(&p.verbose, "v", false, "log what the WAL layers do")
	flag.StringVar(&p.cluster, "cluster", "", "etcd endpoints of a running cluster: append through the client to its walnodes instead")
	flag.StringVar(&p.root, "root", "", "the cluster's root in etcd (cluster mode; default the cluster default)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, p, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "walbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, p params, out io.Writer) error {
	if p.channels < 1 || p.appenders < 1 || p.records < 1 || p.size < 0 {
		return errors.New("channels, appenders and records must be positive, size not negative")
	}
	if p.cluster != "" {
		return runCluster(ctx, p, out)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if p.verbose {
		logger = slog.Default()
	}
	cfg, err := selector.Parse([]byte("local:\n  dir: " + p.dir + "\n"))
	if p.config != "" {
		cfg, err = selector.Load(p.config)
	}
	if err != nil {
		return err
	}
	backend, err := selector.Build(ctx, cfg, selector.Deps{Logger: logger})
	if err != nil {
		return err
	}
	defer func() { _ = backend.Close() }()

	open := walmanager.WALOpenerFunc(func(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
		return adaptor.Open(ctx, backend, ch, adaptor.Options{Logger: logger})
	})
	mgr, err := walmanager.New(open, walmanager.Options{Logger: logger})
	if err != nil {
		return err
	}
	defer func() { _ = mgr.Close(context.Background()) }()

	fmt.Fprintf(out, "backend %s: %d channels × %d appenders × %d records of %d B, term %d\n",
		cfg.Chosen(), p.channels, p.appenders, p.records, p.size, p.term)
	start := time.Now()
	results := make([]channelResult, p.channels)
	var wg sync.WaitGroup
	errs := make(chan error, p.channels)
	for i := range p.channels {
		ch := walmanager.Channel{Name: fmt.Sprintf("walbench-%d", i), Term: p.term}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := runChannel(ctx, mgr, ch, p)
			results[i] = r
			if err != nil {
				errs <- errors.Wrapf(err, "channel %s", ch.Name)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	elapsed := time.Since(start)

	var lat []time.Duration
	total := 0
	for _, r := range results {
		lat = append(lat, r.latencies...)
		total += r.delivered
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	fmt.Fprintf(out, "appended and delivered %d records in %s: %.0f records/s, %.1f MB/s\n",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(),
		float64(total*p.size)/elapsed.Seconds()/1e6)
	fmt.Fprintf(out, "append latency p50 %s, p99 %s, max %s\n", pct(0.5), pct(0.99), lat[len(lat)-1])
	fmt.Fprintln(out, "every acknowledged record was delivered exactly once, in timetick order")
	return nil
}

type channelResult struct {
	latencies []time.Duration
	delivered int
}

// runChannel opens ch through the manager, appends p.records from
// p.appenders goroutines while a scanner tails, checks what it delivered and
// truncates the channel behind it.
func runChannel(ctx context.Context, mgr *walmanager.Manager, ch walmanager.Channel, p params) (channelResult, error) {
	if err := mgr.Open(ctx, ch); err != nil {
		return channelResult{}, err
	}
	defer func() { _ = mgr.Remove(context.Background(), ch) }()
	w, err := mgr.GetAvailableWAL(ch)
	if err != nil {
		return channelResult{}, err
	}
	scanner, err := w.Read(ctx, adaptor.ReadOption{Name: "walbench", DeliverPolicy: adaptor.DeliverLatest()})
	if err != nil {
		return channelResult{}, err
	}
	defer func() { _ = scanner.Close() }()

	var (
		mu    sync.Mutex
		acked = make(map[uint64]bool, p.records)
		lat   = make([]time.Duration, 0, p.records)
		last  message.ID
		wg    sync.WaitGroup
		errc  = make(chan error, p.appenders)
	)
	payload := make([]byte, p.size)
	for g := range p.appenders {
		n := p.records / p.appenders
		if g < p.records%p.appenders {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				m, _ := message.New(payload, map[string]string{"source": "walbench"})
				t0 := time.Now()
				r, err := w.Append(ctx, m)
				if err != nil {
					errc <- err
					return
				}
				d := time.Since(t0)
				mu.Lock()
				acked[r.TimeTick] = true
				lat = append(lat, d)
				if last.IsZero() || last.LT(r.ID) {
					last = r.ID
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		return channelResult{}, err
	}
	if err := w.Sync(ctx); err != nil {
		return channelResult{}, err
	}

	var prev uint64
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for seen := 0; seen < len(acked); seen++ {
		select {
		case m, ok := <-scanner.Chan():
			if !ok {
				return channelResult{}, errors.Wrap(scanner.Error(), "scanner ended early")
			}
			tt, _ := m.TimeTick()
			if tt <= prev || !acked[tt] {
				return channelResult{}, errors.Newf("delivered timetick %d after %d (acknowledged: %v)", tt, prev, acked[tt])
			}
			prev = tt
		case <-timeout.C:
			return channelResult{}, errors.Newf("scanner delivered %d of %d records in a minute", seen, len(acked))
		case <-ctx.Done():
			return channelResult{}, ctx.Err()
		}
	}
	// The run's records are consumed: reclaim their space.
	if err := w.Truncate(ctx, last); err != nil {
		return channelResult{}, err
	}
	return channelResult{latencies: lat, delivered: len(acked)}, nil
}
