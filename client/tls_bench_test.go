package client_test

import (
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// BenchmarkAppendTLS compares appends through the client to a node serving
// mutual TLS, and to one serving mutual TLS with authorization on (a policy
// of 10,000 channel prefixes besides the grant; the principal is the
// client certificate's CN), with appends to a node serving plaintext, in
// the same process
// on the same in-memory backend (so the transport is most of the cost: a
// conservative ratio). Rounds alternate between the two so drift of the
// machine hits both; it reports each mode's throughput and p99, and the
// ratios TLS ÷ plaintext and TLS with authorization ÷ plaintext (authz-*)
// as the median of the rounds' (goal: throughput ≥ 0.85, p99 ≤ 1.2). Both
// clients send appends over HTTP/1.1 (a connection per appender in flight),
// what each gets by default.
//
//	go test -run '^$' -bench AppendTLS -benchtime 1x ./client/
func BenchmarkAppendTLS(b *testing.B) {
	const (
		concurrency = 16
		perRound    = 2000
		rounds      = 10
		payloadSize = 256
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := etcdtest.Client(b, srv.Endpoints())
	l, err := cluster.NewLayout(etcdtest.Prefix(b) + "cluster/")
	require.NoError(b, err)
	p := newTestPKI(b)
	server, _ := p.nodeServer()
	cliCert, cliKey := p.issue("bench", certs.Request{Kind: certs.Client})
	mem := memory.NewCluster()
	startTLSNode(b, cli, l.Root, mem, "plain", nil)
	startTLSNode(b, cli, l.Root, mem, "secure", server)
	startNodeWith(b, cli, mem, node.Config{ID: "authz", Root: l.Root, TLS: server, Authz: benchPolicy(b, "bench", "bench-authz")})
	assign(b, cli, l, "bench-plain", "plain", 1)
	assign(b, cli, l, "bench-secure", "secure", 1)
	assign(b, cli, l, "bench-authz", "authz", 1)

	mtls := p.client(tlsconf.Config{CAFile: p.path("ca.crt"), CertFile: cliCert, KeyFile: cliKey})
	modes := []struct {
		name, channel string
		tls           *tls.Config
		cl            *client.Client
		lat           []time.Duration
		elapsed       time.Duration
		tput, p99     []float64 // per round
	}{{name: "plaintext", channel: "bench-plain"}, {name: "mtls", channel: "bench-secure", tls: mtls},
		{name: "mtls+authz", channel: "bench-authz", tls: mtls}}
	for i := range modes {
		m := &modes[i]
		m.cl, err = client.New(ctx, client.Config{Etcd: cli, Root: l.Root, TLS: m.tls})
		require.NoError(b, err)
		defer m.cl.Close()
	}
	payload := make([]byte, payloadSize)

	// round appends n messages with concurrency appenders and returns the
	// latency of each and the time it took.
	round := func(cl *client.Client, channel string, n int) ([]time.Duration, time.Duration) {
		lat := make([][]time.Duration, concurrency)
		var wg sync.WaitGroup
		start := time.Now()
		for g := range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n / concurrency {
					t0 := time.Now()
					_, err := cl.Append(ctx, channel, client.Message{Payload: payload}, client.Options{})
					if err != nil {
						b.Error(err)
						return
					}
					lat[g] = append(lat[g], time.Since(t0))
				}
			}()
		}
		wg.Wait()
		return slices.Concat(lat...), time.Since(start)
	}
	for i := range modes { // warm up: connections, the channel's open, the allocator
		round(modes[i].cl, modes[i].channel, 400)
	}
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			for i := range modes {
				m := &modes[(i+r)%len(modes)] // alternate who goes first
				lat, elapsed := round(m.cl, m.channel, perRound)
				m.lat, m.elapsed = append(m.lat, lat...), m.elapsed+elapsed
				m.tput = append(m.tput, float64(len(lat))/elapsed.Seconds())
				slices.Sort(lat)
				m.p99 = append(m.p99, float64(lat[len(lat)*99/100]))
			}
		}
	}
	b.StopTimer()
	stats := func(i int) (float64, time.Duration) {
		m := modes[i]
		slices.Sort(m.lat)
		return float64(len(m.lat)) / m.elapsed.Seconds(), m.lat[len(m.lat)*99/100]
	}
	plainTput, plainP99 := stats(0)
	tlsTput, tlsP99 := stats(1)
	authzTput, authzP99 := stats(2)
	b.ReportMetric(plainTput, "plain-appends/s")
	b.ReportMetric(tlsTput, "mtls-appends/s")
	b.ReportMetric(float64(plainP99.Microseconds()), "plain-p99-µs")
	b.ReportMetric(float64(tlsP99.Microseconds()), "mtls-p99-µs")
	b.ReportMetric(authzTput, "authz-appends/s")
	b.ReportMetric(float64(authzP99.Microseconds()), "authz-p99-µs")
	// The ratios of each round's pair, and their median: a burst of load
	// from elsewhere on the machine hits one round, not the figure.
	var tputRatios, p99Ratios, authzTputRatios, authzP99Ratios []float64
	for r := range modes[0].tput {
		tputRatios = append(tputRatios, modes[1].tput[r]/modes[0].tput[r])
		p99Ratios = append(p99Ratios, modes[1].p99[r]/modes[0].p99[r])
		authzTputRatios = append(authzTputRatios, modes[2].tput[r]/modes[0].tput[r])
		authzP99Ratios = append(authzP99Ratios, modes[2].p99[r]/modes[0].p99[r])
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(tputRatios), "throughput-ratio")
	b.ReportMetric(median(p99Ratios), "p99-ratio")
	b.ReportMetric(median(authzTputRatios), "authz-throughput-ratio")
	b.ReportMetric(median(authzP99Ratios), "authz-p99-ratio")
	b.Logf("%d appends of %d B each way in %d alternating rounds, %d appenders: plaintext %.0f/s p99 %s; mutual TLS %.0f/s p99 %s; "+
		"overall throughput ×%.3f, p99 ×%.3f; median of the rounds' ratios: throughput ×%.3f, p99 ×%.3f",
		len(modes[0].lat), payloadSize, rounds, concurrency, plainTput, plainP99, tlsTput, tlsP99,
		tlsTput/plainTput, float64(tlsP99)/float64(plainP99), median(tputRatios), median(p99Ratios))
	b.Logf("mutual TLS and authorization %.0f/s p99 %s: overall throughput ×%.3f, p99 ×%.3f; median of the rounds' ratios: throughput ×%.3f, p99 ×%.3f",
		authzTput, authzP99, authzTput/plainTput, float64(authzP99)/float64(plainP99), median(authzTputRatios), median(authzP99Ratios))
}
