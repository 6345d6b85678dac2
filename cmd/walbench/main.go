// Command walbench runs a streaming node's main job on one node: it builds
// the configured backend (the embedded local backend by default), opens
// channels through the manager, appends from many goroutines while a
// scanner per channel tails them, checks that every acknowledged message was
// delivered exactly once in timetick order, truncates what it wrote, and
// prints throughput and a table of append latencies.
//
//	go run ./cmd/walbench                      # local backend in ./streamwal-data
//	go run ./cmd/walbench -dir 'data #1'       # local backend in that directory
//	go run ./cmd/walbench -backend kafka -addr 127.0.0.1:9092
//	go run ./cmd/walbench -backend s3          # an S3-compatible store (gofakes3) in this process
//	go run ./cmd/walbench -backend s3 -addr http://127.0.0.1:9000 -s3-bucket wal
//	go run ./cmd/walbench -config node.yaml    # any backend (see package walconfig)
//	go run ./cmd/walbench -json                # one JSON object, for scripts
//	go run ./cmd/walbench -cluster http://127.0.0.1:2379   # through the client, against running walnodes
//
// It first prints what the run means:
//
//	4 channels × 16 appenders, 80,000 records of 1 KiB in all, backend local (./streamwal-data, sync always)
//
// then, on stderr, a progress line every second (one line updated in place
// on a terminal), and at the end the throughput and the append latency
// percentiles (p50, p90, p99, p99.9, max). A Kafka or Pulsar cluster (or
// an S3 store of -addr) that does not answer is waited for, with a line
// naming its address, for -connect-timeout. Ctrl-C stops the run and prints the summary of what
// was done; the exit code is then 130.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/s3dev"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

type params struct {
	config   string
	backend  string // local (default), memory, kafka, pulsar or s3, without -config
	addr     string // kafka seed brokers, pulsar service URL or s3 endpoint
	s3Bucket string
	// s3FlushInterval is the s3 backend's FlushInterval (0: its
	// default).
	s3FlushInterval time.Duration
	dir             string
	connectTimeout  time.Duration
	channels        int
	appenders       int
	records         int
	size            int
	term            int64
	verbose         bool
	json            bool
	cluster         string // etcd endpoints of a running cluster: cluster mode
	root            string
	// ca, cert and key reach a cluster that serves TLS (its nodes, and its
	// etcd when the endpoints are https).
	ca, cert, key string

	// progressEvery is the period of the progress lines (0: a second;
	// negative: none); terminal says stderr is a terminal (one line
	// updated in place).
	progressEvery time.Duration
	terminal      bool
}

// errInterrupted marks a run stopped by its context (SIGINT).
var errInterrupted = errors.New("interrupted")

// interrupted is an errInterrupted error that says when: "interrupted
// after 12,000 of 80,000 records were appended".
func interrupted(format string, args ...any) error {
	return fmt.Errorf("%w %s", errInterrupted, fmt.Sprintf(format, args...))
}

// stallTimeout is how long a scanner may deliver nothing once every append
// of its channel is acknowledged.
const stallTimeout = time.Minute

func main() {
	var p params
	flag.StringVar(&p.config, "config", "", "YAML configuration (default: the backend of -backend)")
	flag.StringVar(&p.backend, "backend", "", "backend without -config: local (default), memory, kafka, pulsar or s3")
	flag.StringVar(&p.addr, "addr", "", "-backend kafka: seed brokers host:port[,host:port] (default "+defaultKafkaAddr+"); pulsar: service URL (default "+defaultPulsarAddr+
		"); s3: the store's URL, path-style, credentials from the AWS chain (default: a store in this process, gofakes3)")
	flag.StringVar(&p.s3Bucket, "s3-bucket", "", "-backend s3: the bucket (default "+s3dev.DefaultBucket+"; with -addr it must exist)")
	flag.DurationVar(&p.s3FlushInterval, "s3-flush-interval", 0, "-backend s3: how long an append waits for others to share its object (default 200ms)")
	flag.StringVar(&p.dir, "dir", walconfig.DefaultLocalDir, "directory of the local backend when no -config is given")
	flag.DurationVar(&p.connectTimeout, "connect-timeout", DefaultConnectTimeout, "how long to wait for a Kafka or Pulsar cluster (or the cluster mode's etcd) to answer")
	flag.IntVar(&p.channels, "channels", 4, "channels to open")
	flag.IntVar(&p.appenders, "appenders", 16, "concurrent appenders per channel")
	flag.IntVar(&p.records, "records", 20000, "records to append per channel")
	flag.IntVar(&p.size, "size", 1024, "payload bytes per record")
	flag.Int64Var(&p.term, "term", time.Now().Unix(), "term to open the channels at (a later run must use a higher one)")
	flag.BoolVar(&p.verbose, "v", false, "log what the WAL layers do")
	flag.BoolVar(&p.json, "json", false, "print the summary as one JSON object (progress still goes to stderr)")
	flag.StringVar(&p.cluster, "cluster", "", "etcd endpoints of a running cluster: append through the client to its walnodes instead")
	flag.StringVar(&p.root, "root", "", "the cluster's root in etcd (cluster mode; default the cluster default)")
	flag.StringVar(&p.ca, "ca", "", "cluster mode over TLS: the PEM CA bundle that verifies the nodes (and https etcd)")
	flag.StringVar(&p.cert, "cert", "", "cluster mode over TLS: a PEM client certificate (walctl certs create-client)")
	flag.StringVar(&p.key, "key", "", "the PEM private key of -cert")
	flag.Parse()
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		p.terminal = true
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	if err := run(ctx, p, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "walbench:", err)
		if errors.Is(err, errInterrupted) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// run runs the benchmark p describes: the summary goes to out, progress
// and waiting lines to errOut. A run stopped by ctx prints the summary of
// what it did and returns an errInterrupted error.
func run(ctx context.Context, p params, out, errOut io.Writer) error {
	if p.channels < 1 || p.appenders < 1 || p.records < 1 || p.size < 0 {
		return errors.New("channels, appenders and records must be positive, size not negative")
	}
	if errOut == nil {
		errOut = io.Discard
	}
	if p.cluster != "" {
		return runCluster(ctx, p, out, errOut)
	}
	logger := slog.New(slog.DiscardHandler)
	if p.verbose {
		logger = slog.Default()
	}
	b := &bench{p: p, out: out, errOut: errOut, channels: p.channels,
		verifyMsg: fmt.Sprintf("term %d; a scanner per channel checks that every acknowledged record is delivered once, in timetick order", p.term)}
	remote := false
	c := &connector{logger: logger, timeout: p.connectTimeout, errOut: errOut}
	c.announce = func(name string, cfg any) {
		b.backend = name
		b.target, b.detail, remote = c.describe(cfg)
		b.header()
	}
	backend, err := openBackend(ctx, p, c)
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

	chans := make([]walmanager.Channel, p.channels)
	for i := range chans {
		chans[i] = walmanager.Channel{Name: fmt.Sprintf("walbench-%d", i), Term: p.term}
	}
	defer func() {
		for _, ch := range chans {
			_ = mgr.Remove(context.Background(), ch)
		}
	}()
	wals, err := openChannels(ctx, mgr, chans, remote, c, b)
	if err != nil {
		return err
	}

	b.start = time.Now()
	stopProgress := b.progress()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]channelResult, len(chans))
	var wg sync.WaitGroup
	for i, w := range wals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := runChannel(runCtx, w, p, b)
			results[i] = r
			if err != nil {
				cancel(errors.Wrapf(err, "channel %s", chans[i].Name))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(b.start)
	stopProgress()
	stopped := ctx.Err() != nil
	if err := context.Cause(runCtx); err != nil && !stopped {
		return err
	}

	o := outcome{elapsed: elapsed, interrupted: stopped, verified: !stopped}
	for _, r := range results {
		o.latencies = append(o.latencies, r.latencies...)
	}
	if err := b.report(o); err != nil {
		return err
	}
	if stopped {
		return interrupted("after %s of %s records were appended", commas(b.appended.Load()), commas(b.total()))
	}
	return nil
}

// openChannels opens every channel through the manager, at once, and
// returns their WALs. On a remote backend it gives up after the connect
// timeout, saying every few seconds that it waits.
func openChannels(ctx context.Context, mgr *walmanager.Manager, chans []walmanager.Channel, remote bool, c *connector, b *bench) ([]adaptor.WAL, error) {
	openAll := func(ctx context.Context) error {
		errs := make([]error, len(chans))
		var wg sync.WaitGroup
		for i, ch := range chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = errors.Wrapf(mgr.Open(ctx, ch), "open channel %s", ch.Name)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	var err error
	if remote {
		err = c.wait(ctx, b.backend+" at "+b.target, "open "+plural(len(chans), "channel"), false, openAll)
	} else {
		err = openAll(ctx)
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, errInterrupted) {
			return nil, interrupted("while opening the channels")
		}
		return nil, err
	}
	wals := make([]adaptor.WAL, len(chans))
	for i, ch := range chans {
		if wals[i], err = mgr.GetAvailableWAL(ch); err != nil {
			return nil, err
		}
	}
	return wals, nil
}

type channelResult struct {
	latencies []time.Duration
	delivered int
}

// runChannel appends p.records to w from p.appenders goroutines while a
// scanner tails it, checks that every acknowledged record was delivered
// once, in timetick order, and truncates the channel behind it. When ctx
// ends first it returns what was done, without an error.
func runChannel(ctx context.Context, w adaptor.WAL, p params, b *bench) (channelResult, error) {
	scanner, err := w.Read(ctx, adaptor.ReadOption{Name: "walbench", DeliverPolicy: cursor.Latest()})
	if err != nil {
		if ctx.Err() != nil {
			return channelResult{}, nil
		}
		return channelResult{}, err
	}
	defer func() { _ = scanner.Close() }()

	// The scanner is read while the appenders run; the count it must
	// reach is known once they are done.
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	want := make(chan int, 1)
	type consumed struct {
		timeticks []uint64
		err       error
	}
	consumer := make(chan consumed, 1)
	go func() {
		tts, err := consume(cctx, scanner, want, b)
		consumer <- consumed{tts, err}
	}()

	capacity := min(p.records, 1<<16)
	var (
		mu    sync.Mutex
		acked = make(map[uint64]bool, capacity)
		lat   = make([]time.Duration, 0, capacity)
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
				if ctx.Err() != nil {
					return
				}
				m, _ := message.New(payload, map[string]string{"source": "walbench"})
				t0 := time.Now()
				r, err := w.Append(ctx, m)
				if err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
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
				b.appended.Inc()
			}
		}()
	}
	wg.Wait()
	close(errc)
	appendErr := <-errc
	if appendErr == nil && ctx.Err() == nil {
		appendErr = w.Sync(ctx)
	}
	if appendErr != nil || ctx.Err() != nil {
		stopConsumer()
		c := <-consumer
		res := channelResult{latencies: lat, delivered: len(c.timeticks)}
		if appendErr != nil && ctx.Err() == nil {
			return res, appendErr
		}
		return res, nil
	}
	want <- len(acked)
	c := <-consumer
	res := channelResult{latencies: lat, delivered: len(c.timeticks)}
	if ctx.Err() != nil {
		return res, nil
	}
	if c.err != nil {
		return res, c.err
	}
	// Timeticks arrived strictly increasing, so each once; as many as
	// acknowledged and each acknowledged: exactly the acknowledged ones.
	for _, tt := range c.timeticks {
		if !acked[tt] {
			return res, errors.Newf("delivered timetick %d, which no append acknowledged", tt)
		}
	}
	if len(c.timeticks) != len(acked) {
		return res, errors.Newf("delivered %d records, %d were acknowledged", len(c.timeticks), len(acked))
	}
	// The run's records are consumed: reclaim their space.
	if err := w.Truncate(ctx, last); err != nil && ctx.Err() == nil {
		return res, err
	}
	return res, nil
}

// consume reads the scanner until it has delivered the count want sends,
// checking that timeticks strictly increase; it returns them. It stops
// without an error when ctx ends, and with one when the scanner ends or
// stalls for stallTimeout once the count is known.
func consume(ctx context.Context, scanner walimpls.Scanner, want <-chan int, b *bench) ([]uint64, error) {
	var (
		tts   []uint64
		prev  uint64
		n     = -1
		timer *time.Timer
		stall <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n < 0 || len(tts) < n {
		select {
		case m, ok := <-scanner.Chan():
			if !ok {
				if ctx.Err() != nil {
					return tts, nil
				}
				return tts, errors.Wrap(scanner.Error(), "scanner ended early")
			}
			tt, _ := m.TimeTick()
			if tt <= prev {
				return tts, errors.Newf("delivered timetick %d after %d", tt, prev)
			}
			prev = tt
			tts = append(tts, tt)
			b.delivered.Inc()
			if timer != nil {
				timer.Reset(stallTimeout)
			}
		case n = <-want:
			timer = time.NewTimer(stallTimeout)
			stall = timer.C
		case <-stall:
			return tts, errors.Newf("scanner delivered %d of %d records, then nothing for %s", len(tts), n, stallTimeout)
		case <-ctx.Done():
			return tts, nil
		}
	}
	return tts, nil
}
