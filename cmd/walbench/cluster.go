package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// runCluster is the cluster mode: appenders through the client against the
// walnodes of a running cluster, on its channels, then every channel read
// back through the client to check each acknowledged record once, in each
// appender's order.
func runCluster(ctx context.Context, p params, out, errOut io.Writer) error {
	b := &bench{p: p, out: out, errOut: errOut, backend: "cluster", target: p.cluster,
		verifyMsg: "every channel is read back through the client to check each acknowledged record arrives once, in each appender's order"}
	c := &connector{timeout: p.connectTimeout, errOut: errOut}
	ecfg := etcdstore.Config{Endpoints: strings.Split(p.cluster, ",")}
	var nodeTLS *tls.Config
	if p.ca != "" || p.cert != "" || p.key != "" {
		var err error
		nodeTLS, _, err = tlsconf.Config{CAFile: p.ca, CertFile: p.cert, KeyFile: p.key,
			Names: tlsconf.Names{CAFile: "-ca", CertFile: "-cert", KeyFile: "-key"}}.Client()
		if err != nil {
			return err
		}
		if strings.HasPrefix(p.cluster, "https://") {
			ecfg.TLS = nodeTLS
		}
	}
	var cli *clientv3.Client
	err := c.wait(ctx, "etcd at "+p.cluster, "answer", true, func(ctx context.Context) (err error) {
		cli, err = etcdstore.Dial(ctx, ecfg)
		return err
	})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	cl, err := client.New(ctx, client.Config{Etcd: cli, Root: p.root, TLS: nodeTLS})
	if err != nil {
		return err
	}
	defer cl.Close()
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(p.connectTimeout, DefaultConnectTimeout))
	snap, err := cl.View().WaitFor(wctx, func(s cluster.Snapshot) bool { return len(s.Assignments) > 0 })
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted("while waiting for a channel assignment")
		}
		return errors.Wrapf(err, "no channel assigned in the cluster within %s (-connect-timeout)", cmp.Or(p.connectTimeout, DefaultConnectTimeout))
	}
	var names []string
	for ch := range snap.Assignments {
		names = append(names, ch)
	}
	slices.Sort(names)
	if len(names) > p.channels {
		names = names[:p.channels]
	}
	b.channels = len(names)
	b.detail = plural(len(snap.Nodes), "node")
	b.header()

	run := fmt.Sprintf("%x", time.Now().UnixNano())
	var (
		mu    sync.Mutex
		lat   []time.Duration
		acked = map[string]bool{}
		wg    sync.WaitGroup
		errs  = make(chan error, len(names)*p.appenders)
	)
	b.start = time.Now()
	stopProgress := b.progress()
	defer stopProgress()
	actx, stopAppends := context.WithCancel(ctx)
	defer stopAppends()
	pad := strings.Repeat("x", max(p.size-32, 0))
	for _, ch := range names {
		for g := range p.appenders {
			n := p.records / p.appenders
			if g < p.records%p.appenders {
				n++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					if actx.Err() != nil {
						return
					}
					payload := fmt.Sprintf("%s/%d/%08d/%s", run, g, i, pad)
					t0 := time.Now()
					if _, err := cl.Append(actx, ch, client.Message{Payload: []byte(payload)}, client.Options{}); err != nil {
						if actx.Err() == nil {
							errs <- errors.Wrapf(err, "%s", ch)
							stopAppends()
						}
						return
					}
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					acked[ch+" "+payload] = true
					mu.Unlock()
					b.appended.Inc()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil && ctx.Err() == nil {
		return err
	}
	// The appends' time, for their rate.
	elapsed := time.Since(b.start)
	// partial reports what was done when ctx ended.
	partial := func() error {
		stopProgress()
		if err := b.report(outcome{elapsed: elapsed, latencies: lat, interrupted: true}); err != nil {
			return err
		}
		return interrupted("after %s of %s records were appended", commas(b.appended.Load()), commas(b.total()))
	}
	if ctx.Err() != nil {
		return partial()
	}

	// Read back this run's records.
	for _, ch := range names {
		want := 0
		for k := range acked {
			if strings.HasPrefix(k, ch+" ") {
				want++
			}
		}
		seen := map[string]bool{}
		last := map[string]string{}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := cl.Read(rctx, ch, client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
			p := string(d.GetPayload())
			if !strings.HasPrefix(p, run+"/") {
				return nil // an earlier run's
			}
			if seen[p] {
				return errors.Newf("%s: %.40s delivered twice", ch, p)
			}
			seen[p] = true
			b.delivered.Inc()
			parts := strings.SplitN(p, "/", 4) // run, appender, sequence, padding
			if len(parts) < 3 {
				return errors.Newf("%s: malformed record %.40q", ch, p)
			}
			g, seq := parts[1], parts[2]
			if prev, ok := last[g]; ok && prev >= seq {
				return errors.Newf("%s: appender %s's record %s delivered after %s", ch, g, seq, prev)
			}
			last[g] = seq
			if len(seen) == want {
				cancel()
			}
			return nil
		})
		cancel()
		if ctx.Err() != nil {
			return partial()
		}
		if err != nil {
			return err
		}
		if len(seen) != want {
			return errors.Newf("%s: read back %d of %d acknowledged records", ch, len(seen), want)
		}
	}
	stopProgress()
	return b.report(outcome{elapsed: elapsed, latencies: lat, verified: true})
}
