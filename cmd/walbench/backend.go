package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/internal/s3dev"
	"github.com/streamwal/streamwal/utility/backoff"
	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// Addresses a -backend kafka or pulsar uses when -addr is not given.
const (
	defaultKafkaAddr  = "127.0.0.1:9092"
	defaultPulsarAddr = "pulsar://127.0.0.1:6650"
)

// DefaultConnectTimeout is how long walbench waits for a Kafka or Pulsar
// cluster (or the cluster mode's etcd) before it gives up.
const DefaultConnectTimeout = 30 * time.Second

// stillWaitingEvery is the period of the "still waiting" lines while a
// cluster does not answer.
const stillWaitingEvery = 5 * time.Second

// inProcessS3 is the configuration of -backend s3 without -addr: a store
// (s3dev) that openBackend starts in this process, with this bucket, and
// the backend's FlushInterval (0: its default).
type inProcessS3 struct {
	bucket        string
	flushInterval time.Duration
}

// flagConfig is the backend configuration the flags describe, as the
// backend's own Config struct (nothing passes through YAML text, so a -dir
// of any spelling is the directory used), or an inProcessS3.
func flagConfig(p params) (name string, cfg any, err error) {
	name = p.backend
	if name == "" {
		name = local.Name
	}
	addr := p.addr
	if name != s3.Name && (p.s3Bucket != "" || p.s3FlushInterval != 0) {
		return "", nil, errors.New("-s3-bucket and -s3-flush-interval are for -backend s3")
	}
	switch name {
	case local.Name:
		if addr != "" {
			return "", nil, errors.New("-addr is for -backend kafka, pulsar or s3; the local backend takes -dir")
		}
		return name, &local.Config{Dir: p.dir}, nil
	case memory.Name:
		if addr != "" {
			return "", nil, errors.New("-addr is for -backend kafka, pulsar or s3")
		}
		return name, &memory.Config{}, nil
	case s3.Name:
		bucket := p.s3Bucket
		if bucket == "" {
			bucket = s3dev.DefaultBucket
		}
		if addr == "" {
			return name, &inProcessS3{bucket: bucket, flushInterval: p.s3FlushInterval}, nil
		}
		// Path-style: what stores other than AWS S3 want (-config for
		// AWS, credentials and the rest).
		return name, &s3.Config{Endpoint: addr, Bucket: bucket, PathStyle: true, FlushInterval: p.s3FlushInterval}, nil
	case kafka.Name:
		if addr == "" {
			addr = defaultKafkaAddr
		}
		return name, &kafka.Config{SeedBrokers: strings.Split(addr, ",")}, nil
	case pulsar.Name:
		if addr == "" {
			addr = defaultPulsarAddr
		}
		if !strings.Contains(addr, "://") {
			addr = "pulsar://" + addr
		}
		return name, &pulsar.Config{ServiceURL: addr}, nil
	}
	return "", nil, errors.Wrapf(walimpls.ErrUnknownBackend, "-backend %q (want local, memory, kafka, pulsar or s3)", name)
}

// newConfig returns a pointer to a zero Config of the named backend, nil
// for a backend walbench does not know the configuration of.
func newConfig(name string) any {
	switch name {
	case local.Name:
		return &local.Config{}
	case memory.Name:
		return &memory.Config{}
	case kafka.Name:
		return &kafka.Config{}
	case pulsar.Name:
		return &pulsar.Config{}
	case s3.Name:
		return &s3.Config{}
	}
	return nil
}

// describe says where a backend's configuration points: the directory or
// the address, more about it, and whether it is a remote cluster that
// walbench waits for.
func describe(cfg any) (target, detail string, remote bool) {
	switch c := cfg.(type) {
	case *local.Config:
		sync := c.Sync
		if sync == "" {
			sync = local.SyncAlways
		}
		return c.Dir, "sync " + string(sync), false
	case *memory.Config:
		return "", "in this process", false
	case *kafka.Config:
		return strings.Join(c.SeedBrokers, ","), "", true
	case *pulsar.Config:
		return c.ServiceURL, "", true
	case *s3.Config:
		target = c.Endpoint
		if target == "" {
			target = "AWS S3 " + cmpOr(c.Region, s3.DefaultRegion)
		}
		prefix := cmpOr(c.Prefix, s3.DefaultPrefix)
		if c.Prefix == "/" {
			prefix = "none"
		}
		return target, fmt.Sprintf("bucket %s, prefix %s", c.Bucket, prefix), true
	}
	return "", "", false
}

// describe is the function describe, which knows the store c started in
// this process (nothing to wait for).
func (c *connector) describe(cfg any) (target, detail string, remote bool) {
	target, detail, remote = describe(cfg)
	if sc, ok := cfg.(*s3.Config); ok && c.dev != nil && sc.Endpoint == c.dev.Endpoint {
		return target, "gofakes3 in this process, bucket " + sc.Bucket, false
	}
	return target, detail, remote
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// assign is a walimpls.ConfigDecoder that hands a builder the ready
// Config cfg points to.
func assign(cfg any) walimpls.ConfigDecoder {
	return func(into any) error {
		dst, src := reflect.ValueOf(into), reflect.ValueOf(cfg)
		if dst.Kind() != reflect.Pointer || dst.Type() != src.Type() {
			return errors.Newf("walbench: config %T does not decode into %T", cfg, into)
		}
		dst.Elem().Set(src.Elem())
		return nil
	}
}

// connector builds a backend from its Config: it announces the run (the
// header, once the target is known), and waits for a remote cluster,
// saying so, up to the connect timeout.
type connector struct {
	logger  *slog.Logger
	timeout time.Duration
	errOut  io.Writer
	// announce is called once the backend's configuration is known and
	// valid, before connecting.
	announce func(name string, cfg any)
	// dev is the S3-compatible store of -backend s3 without -addr, in
	// this process; nil without one.
	dev *s3dev.Store
}

// build builds the backend inner with configuration cfg (a pointer to its
// Config).
func (c *connector) build(ctx context.Context, inner walimpls.Builder, cfg any, bp walimpls.BuildParams) (walimpls.Opener, error) {
	if v, ok := cfg.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, err
		}
	}
	c.announce(inner.Name(), cfg)
	bp.Config = assign(cfg)
	target, _, remote := c.describe(cfg)
	if !remote {
		return inner.Build(ctx, bp)
	}
	var o walimpls.Opener
	err := c.wait(ctx, inner.Name()+" at "+target, "answer", true, func(ctx context.Context) (err error) {
		o, err = inner.Build(ctx, bp)
		return err
	})
	return o, err
}

// wait waits up to the connect timeout for what (such as "kafka at
// 127.0.0.1:9092") to do until ("answer", "open 4 channels"): attempt is
// given a context that ends then. With retry, a failed attempt is repeated
// (but not a configuration error), and a line saying what it waits for is
// printed at once; without, one attempt runs. While it waits, a line every
// few seconds says so, with the last error. Past the timeout, the error
// matches both context.DeadlineExceeded and the last attempt's error.
func (c *connector) wait(ctx context.Context, what, until string, retry bool, attempt func(context.Context) error) error {
	timeout := c.timeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	if retry {
		fmt.Fprintf(c.errOut, "waiting for %s to %s (giving up after %s, -connect-timeout)\n", what, until, timeout)
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var (
		mu   sync.Mutex
		last error
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(stillWaitingEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				mu.Lock()
				why := ""
				if last != nil {
					why = ": " + last.Error()
				}
				mu.Unlock()
				fmt.Fprintf(c.errOut, "still waiting for %s to %s after %s of %s%s\n",
					what, until, now.Sub(start).Round(time.Second), timeout, why)
			}
		}
	}()
	defer func() { close(done); wg.Wait() }()

	bo := backoff.Config{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for n := 0; ; n++ {
		err := attempt(cctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return interrupted("while waiting for %s to %s", what, until)
		}
		if errors.Is(err, walimpls.ErrInvalidConfig) || (!retry && cctx.Err() == nil) {
			return err
		}
		mu.Lock()
		// An attempt cut short by the deadline says less than the one
		// before it (connection refused, say): that one is reported.
		if cctx.Err() == nil || last == nil {
			last = err
		}
		err = last
		mu.Unlock()
		if !retry || bo.Wait(cctx, n) != nil {
			if ctx.Err() != nil {
				return interrupted("while waiting for %s to %s", what, until)
			}
			// cctx's end and the last attempt's error, errors.Is
			// matching either (fmt.Errorf: cockroachdb/errors v1.13
			// formats a second %w as %!w and unwraps neither).
			return fmt.Errorf("%s did not %s within %s (-connect-timeout): %w (last attempt: %w)", what, until, timeout, cctx.Err(), err)
		}
	}
}

// openBackend builds the backend of the flags or of the -config file,
// announcing the run through c.
func openBackend(ctx context.Context, p params, c *connector) (walimpls.Opener, error) {
	reg, err := walconfig.Registry(nil)
	if err != nil {
		return nil, err
	}
	bp := walimpls.BuildParams{Logger: c.logger}
	if p.config == "" {
		name, cfg, err := flagConfig(p)
		if err != nil {
			return nil, err
		}
		inner, err := reg.Lookup(name)
		if err != nil {
			return nil, err
		}
		if dev, ok := cfg.(*inProcessS3); ok {
			return buildInProcessS3(ctx, c, inner, *dev, bp)
		}
		return c.build(ctx, inner, cfg, bp)
	}
	if p.backend != "" || p.addr != "" || p.s3Bucket != "" || p.s3FlushInterval != 0 {
		return nil, errors.New("-backend and -addr choose the backend without a -config file (so do -s3-bucket and -s3-flush-interval); the file names its own")
	}
	file, err := walconfig.Load(p.config)
	if err != nil {
		return nil, err
	}
	// The file is decoded by walconfig, strictly; the builders it calls
	// are wrapped to see the decoded Config (for the header and the
	// connect wait).
	wrapped := walimpls.NewRegistry()
	for _, name := range reg.Names() {
		inner, err := reg.Lookup(name)
		if err != nil {
			return nil, err
		}
		if err := wrapped.Register(watched{inner: inner, c: c}); err != nil {
			return nil, err
		}
	}
	b, err := walconfig.Build(ctx, file, walconfig.Deps{Registry: wrapped, Logger: c.logger})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// buildInProcessS3 starts an S3-compatible store in this process (gofakes3,
// on a free loopback port) with dev's bucket, and builds the s3 backend on
// it; closing the Opener stops the store.
func buildInProcessS3(ctx context.Context, c *connector, inner walimpls.Builder, dev inProcessS3, bp walimpls.BuildParams) (walimpls.Opener, error) {
	st, err := s3dev.Start("127.0.0.1:0", dev.bucket)
	if err != nil {
		return nil, err
	}
	c.dev = st
	cfg := st.Config("")
	cfg.FlushInterval = dev.flushInterval
	o, err := c.build(ctx, inner, &cfg, bp)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return withStore{Opener: o, st: st}, nil
}

// withStore is an Opener that stops the store it runs on once closed.
type withStore struct {
	walimpls.Opener
	st *s3dev.Store
}

func (w withStore) Close() error {
	err := w.Opener.Close()
	return errors.Join(err, w.st.Close())
}

// watched is a builder that decodes its configuration itself and builds
// through the connector.
type watched struct {
	inner walimpls.Builder
	c     *connector
}

func (w watched) Name() string { return w.inner.Name() }

func (w watched) Build(ctx context.Context, bp walimpls.BuildParams) (walimpls.Opener, error) {
	cfg := newConfig(w.inner.Name())
	if cfg == nil {
		w.c.announce(w.inner.Name(), nil)
		return w.inner.Build(ctx, bp)
	}
	if bp.Config != nil {
		if err := bp.Config(cfg); err != nil {
			return nil, errors.WithStack(fmt.Errorf("%s: decode config: %w: %w", w.inner.Name(), err, walimpls.ErrInvalidConfig))
		}
	}
	return w.c.build(ctx, w.inner, cfg, bp)
}
