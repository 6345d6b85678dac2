package coordinator

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/utility/backoff"
)

// liveness.go is failure detection's evidence: how a watch follows one
// node's process, and the one thing it takes as proof that the process is
// gone (see the package doc, "Failure detection").

// eventKind is what a watch learned.
type eventKind uint8

const (
	// eventAlive: a liveness stream to the node is established.
	eventAlive eventKind = iota + 1
	// eventSuspect: no stream, and no proof either way (a connection that
	// timed out or was reset, an answer other than 200).
	eventSuspect
	// eventDead: a connection to the node's address was refused: nothing
	// listens there any more, its process is gone.
	eventDead
)

func (k eventKind) String() string {
	switch k {
	case eventAlive:
		return "alive"
	case eventSuspect:
		return "suspect"
	case eventDead:
		return "dead"
	}
	return "eventKind(?)"
}

// liveness watches nodes' processes.
type liveness struct {
	// dial connects to a node's address (a net.Dialer bounded by the probe
	// timeout; tests replace it).
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// timeout bounds writing the request (and the TLS handshake).
	timeout time.Duration
	// tls, when set, is how the node's API is reached: a handshake that
	// fails proves nothing (it is not a refused connection).
	tls *tls.Config
	// retry paces the attempts after one that proved nothing.
	retry backoff.Config
	now   func() time.Time
	log   *slog.Logger
}

// watch follows the process of node, registered at addr, until its death
// is confirmed or ctx ends, and reports what it learns: alive when a
// liveness stream is established, suspect when an attempt proves nothing,
// each only when it changes, and dead once, with since, the first sign
// (the end of the last stream, or the start of the watch).
//
// A stream that ends (the process closed it, or died and its kernel did)
// is followed at once by a new connection: that connection is the probe.
// Refused, it is the proof; accepted, the node is alive (a new stream), or
// stalled (the kernel accepts, the process does not answer: the watch
// waits for the answer, without a deadline); anything else proves nothing
// and is tried again with backoff. A stalled or partitioned process is
// never reported dead: only its lease moves its channels.
func (l liveness) watch(ctx context.Context, node, addr string, report func(kind eventKind, at, since time.Time)) {
	since := l.now()
	var last eventKind
	tell := func(k eventKind, at time.Time) {
		if k != last {
			last = k
			report(k, at, since)
		}
	}
	for attempt := 0; ctx.Err() == nil; {
		held, err := l.hold(ctx, node, addr, func() { tell(eventAlive, l.now()) })
		if ctx.Err() != nil {
			return
		}
		now := l.now()
		switch {
		case refused(err):
			tell(eventDead, now)
			return
		case held:
			// The stream ended: probe at once.
			since, attempt = now, 0
			continue
		}
		l.log.Debug("liveness attempt proved nothing", "node", node, "addr", addr, "error", err)
		tell(eventSuspect, now)
		if l.retry.Wait(ctx, attempt) != nil {
			return
		}
		attempt++
	}
}

// hold connects to addr, asks for node's liveness stream and reads it
// until it ends. held reports whether the stream was established (then
// established was called); err is why it ended, or why it could not start.
func (l liveness) hold(ctx context.Context, node, addr string, established func()) (held bool, err error) {
	raw, err := l.dial(ctx, addr)
	if err != nil {
		return false, err
	}
	defer func() { _ = raw.Close() }()
	defer context.AfterFunc(ctx, func() { _ = raw.Close() })()
	conn := raw
	scheme := "http"
	if l.tls != nil {
		scheme = "https"
		cfg := l.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		cfg.NextProtos = []string{"http/1.1"} // the stream below is HTTP/1.1
		tc := tls.Client(conn, cfg)
		_ = raw.SetDeadline(l.now().Add(l.timeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			return false, errors.Wrap(err, "liveness tls handshake")
		}
		_ = raw.SetDeadline(time.Time{})
		conn = tc
	}

	u := url.URL{Scheme: scheme, Host: addr, Path: cluster.LivenessPath, RawQuery: url.Values{"node": {node}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, errors.Wrap(err, "liveness request")
	}
	_ = conn.SetWriteDeadline(l.now().Add(l.timeout))
	if err := req.Write(conn); err != nil {
		return false, errors.Wrap(err, "send liveness request")
	}
	_ = conn.SetWriteDeadline(time.Time{})
	// No read deadline: a stalled process answers when it runs again.
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return false, errors.Wrap(err, "read liveness answer")
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false, errors.Newf("liveness answer %s", resp.Status)
	}
	established()
	_, err = io.Copy(io.Discard, resp.Body)
	if err == nil {
		err = io.EOF
	}
	return true, err
}

// refused reports whether err is a connection refused: the address's host
// answered that nothing listens on the port.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// dialer returns the dial of liveness in production: TCP, bounded by
// timeout, with the kernel's keepalives (a peer gone without a word ends
// the stream eventually; that proves nothing either).
func dialer(timeout time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}
}
