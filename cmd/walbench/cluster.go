package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/meta/etcdstore"
)

// runCluster is the cluster mode: appenders through the client against the
// walnodes of a running cluster, on its channels, then every channel read
// back through the client to check each acknowledged record once, in each
// appender's order.
func runCluster(ctx context.Context, p params, out io.Writer) error {
	cli, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: strings.Split(p.cluster, ",")})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	c, err := client.New(ctx, client.Config{Etcd: cli, Root: p.root})
	if err != nil {
		return err
	}
	defer c.Close()
	snap, err := c.View().WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Assignments) > 0 })
	if err != nil {
		return errors.Wrap(err, "no channel assigned in the cluster")
	}
	var names []string
	for ch := range snap.Assignments {
		names = append(names, ch)
	}
	slices.Sort(names)
	if len(names) > p.channels {
		names = names[:p.channels]
	}
	fmt.Fprintf(out, "cluster %s: %d channels × %d appenders × %d records of %d B through the client (%d nodes)\n",
		p.cluster, len(names), p.appenders, p.records, p.size, len(snap.Nodes))

	run := fmt.Sprintf("%x", time.Now().UnixNano())
	var (
		mu    sync.Mutex
		lat   []time.Duration
		acked = map[string]bool{}
		wg    sync.WaitGroup
		errs  = make(chan error, len(names)*p.appenders)
	)
	start := time.Now()
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
					payload := fmt.Sprintf("%s/%d/%08d/%s", run, g, i, pad)
					t0 := time.Now()
					if _, err := c.Append(ctx, ch, client.Message{Payload: []byte(payload)}, client.Options{}); err != nil {
						errs <- errors.Wrapf(err, "%s", ch)
						return
					}
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					acked[ch+" "+payload] = true
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	fmt.Fprintf(out, "appended %d records in %s: %.0f records/s, append latency p50 %s, p99 %s, max %s\n",
		len(lat), elapsed.Round(time.Millisecond), float64(len(lat))/elapsed.Seconds(), pct(0.5), pct(0.99), lat[len(lat)-1])

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
		err := c.Read(rctx, ch, client.ReadOptions{}, func(d *streamwalv1.Delivered) error {
			p := string(d.GetPayload())
			if !strings.HasPrefix(p, run+"/") {
				return nil // an earlier run's
			}
			if seen[p] {
				return errors.Newf("%s: %.40s delivered twice", ch, p)
			}
			seen[p] = true
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
		if err != nil {
			return err
		}
		if len(seen) != want {
			return errors.Newf("%s: read back %d of %d acknowledged records", ch, len(seen), want)
		}
	}
	fmt.Fprintln(out, "every acknowledged record was read back exactly once, in each appender's order")
	return nil
}
