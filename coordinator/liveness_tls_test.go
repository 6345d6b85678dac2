package coordinator

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
	"github.com/streamwal/streamwal/utility/backoff"
)

// Failure detection reaches nodes that serve TLS with mutual TLS: the
// stream is held over TLS; a handshake the node refuses (a certificate of
// another CA) proves nothing (suspect, never dead); a node whose process
// is gone is still confirmed dead by the refused connection.
func TestLivenessOverTLS(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, ca *certs.Authority, kind certs.Kind) (string, string) {
		pair, err := ca.Issue(certs.Request{CommonName: name, Kind: kind, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		require.NoError(t, err)
		require.NoError(t, certs.Write(dir, name+".crt", name+".key", pair, false))
		return filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	}
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	other, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(caFile, ca.Pair.CertPEM, 0o644))
	nodeCrt, nodeKey := write("n1", ca, certs.Node)
	peerCrt, peerKey := write("n2", ca, certs.Node)
	strangerCrt, strangerKey := write("n3", other, certs.Node)

	server, _, err := tlsconf.Config{CertFile: nodeCrt, KeyFile: nodeKey, ClientCAFile: caFile}.Server()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc(cluster.LivenessPath, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	srv := &http.Server{Handler: mux, TLSConfig: server, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.ServeTLS(ln, "", "")
	}()
	addr := ln.Addr().String()

	watch := func(ctx context.Context, c tlsconf.Config) <-chan eventKind {
		cfg, _, err := c.Client()
		require.NoError(t, err)
		events := make(chan eventKind, 16)
		lv := liveness{dial: dialer(time.Second), timeout: time.Second, tls: cfg, clock: clockwork.NewRealClock(),
			log: slog.New(slog.DiscardHandler), retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
		go func() {
			defer close(events)
			lv.watch(ctx, registration{node: "n1", addr: addr}, func(k eventKind, _, _ time.Time) { events <- k })
		}()
		return events
	}
	next := func(events <-chan eventKind) eventKind {
		select {
		case k := <-events:
			return k
		case <-time.After(30 * time.Second):
			t.Fatal("no liveness event")
			return 0
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	strangers := watch(ctx, tlsconf.Config{CAFile: caFile, CertFile: strangerCrt, KeyFile: strangerKey})
	require.Equal(t, eventSuspect, next(strangers), "a refused handshake proves nothing")
	cancel()
	for range strangers {
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	peers := watch(ctx, tlsconf.Config{CAFile: caFile, CertFile: peerCrt, KeyFile: peerKey})
	require.Equal(t, eventAlive, next(peers))
	_ = srv.Close() // the process dies: its port refuses
	<-served
	k := next(peers)
	if k == eventSuspect {
		k = next(peers)
	}
	require.Equal(t, eventDead, k)

	// Heartbeats over TLS: the silence is timed below TLS, on the socket.
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hb := startLivenessServerOn(t, "n1", tls.NewListener(hln, server))
	hb.beating.Store(true)
	peer, _, err := tlsconf.Config{CAFile: caFile, CertFile: peerCrt, KeyFile: peerKey}.Client()
	require.NoError(t, err)
	type event struct {
		kind      eventKind
		at, since time.Time
	}
	hevents := make(chan event, 16)
	hctx, hcancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	lv := liveness{dial: dialer(time.Second), timeout: time.Second, tls: peer, clock: clockwork.NewRealClock(),
		log: slog.New(slog.DiscardHandler), retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
	go func() {
		defer close(watched)
		lv.watch(hctx, registration{node: "n1", addr: hln.Addr().String(), lease: 1, ttl: 200 * time.Millisecond},
			func(k eventKind, at, since time.Time) { hevents <- event{k, at, since} })
	}()
	defer func() { hcancel(); <-watched }()
	hnext := func() event {
		select {
		case ev := <-hevents:
			return ev
		case <-time.After(30 * time.Second):
			t.Fatal("no liveness event")
			return event{}
		}
	}
	require.Equal(t, eventAlive, hnext().kind)
	for hb.beats.Load() < 3 {
		time.Sleep(5 * time.Millisecond) // a condition, polled
	}
	hb.stall()
	ev := hnext()
	require.Equal(t, eventSilent, ev.kind)
	require.GreaterOrEqual(t, ev.at.Sub(ev.since), 220*time.Millisecond)
	hb.resume()
	require.Equal(t, eventHeard, hnext().kind)
}
