package client

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/security/tlsconf"
)

// secure.go: what the client does about TLS and credentials.

// probeTimeout bounds the connection tlsRefusal makes to find why a TLS
// connection failed.
const probeTimeout = 3 * time.Second

// tlsRefusal returns, for an attempt that failed with err at addr, why no
// connection to addr can succeed with this client's settings (a
// certificate refused either way, TLS to a plaintext port, plaintext to a
// TLS port), or nil when err is no such thing and the attempt may be
// retried. Nothing is stored by such an attempt: the node never read it.
func (c *Client) tlsRefusal(ctx context.Context, addr string, err error) error {
	if c.cfg.TLS == nil {
		// A TLS server answers an HTTP/1 request with a 400 and this text;
		// connect reports the status only.
		if connect.CodeOf(err) == connect.CodeInternal && strings.Contains(err.Error(), "400 Bad Request") {
			return errors.Wrapf(err, "the node at %s answers plaintext with 400 Bad Request: it serves TLS, give the client a TLS configuration", addr)
		}
		return nil
	}
	if handshakeError(err) {
		return err
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return errors.Wrapf(err, "the node at %s serves plaintext: it has no TLS", addr)
	}
	if connectionLost(err) && ctx.Err() == nil {
		// Over TLS 1.3 the server refuses a client certificate after the
		// client's handshake is done: the request fails as a connection
		// that could not be established, was reset or ended. Ask the
		// server again, and read its answer.
		if perr := tlsconf.Probe(ctx, addr, c.cfg.TLS, probeTimeout); perr != nil && handshakeError(perr) {
			return errors.Wrap(perr, err.Error())
		}
	}
	return nil
}

// connectionLost reports whether err is a connection to a node that
// failed after it was made: not refused (the node is gone), not timed out
// (it is slow or unreachable; a probe would wait as long).
func connectionLost(err error) bool {
	var ne net.Error
	// connect reports a request whose write failed (the connection reset
	// by a server that refused the handshake) as Canceled; the caller's
	// context is alive whenever this is asked.
	code := connect.CodeOf(err)
	if (code != connect.CodeUnavailable && code != connect.CodeCanceled) || errors.Is(err, syscall.ECONNREFUSED) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return false
	}
	// What a lost connection looks like under connect's Unavailable, not
	// an answer of the node's own.
	// net.ErrClosed: the transport closed the connection under a write
	// when its reader met the server's alert.
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "http2: ")
}

// handshakeError reports whether err is a TLS handshake that failed for a
// reason a retry does not change: a certificate either side refuses, or a
// peer that does not speak TLS.
func handshakeError(err error) bool {
	var (
		verify *tls.CertificateVerificationError
		record tls.RecordHeaderError
		alert  tls.AlertError
		op     *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &record), errors.As(err, &alert):
		return true
	case errors.As(err, &op) && op.Op == "remote error": // an alert the server sent
		return true
	}
	return false
}

// MaxConnsPerNode bounds the connections the default client opens to a node
// over TLS for its short calls, well below a node's default bound per peer
// (256, node.Config's MaxConnsPerPeer); a call beyond it waits for one.
const MaxConnsPerNode = 64

// defaultHTTP is one of the client's HTTP clients when Config.HTTP is nil:
// over TLS, streams says which. Appends and the other short calls go over
// HTTP/1.1, a connection per call in flight: on HTTP/2 every call to a node
// shares one connection whose single reader and writer pace them all, and
// mutual TLS then gave about 0.7 of plaintext's append throughput, with
// HTTP/1.1 about 0.9 (BenchmarkAppendTLS; plaintext speaks HTTP/1.1 too).
// Reads stream for as long as the caller reads: over HTTP/1.1 each would
// hold a connection, so they share one HTTP/2 connection per node.
func defaultHTTP(tlsCfg *tls.Config, streams bool) *http.Client {
	t := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		MaxIdleConnsPerHost:   MaxConnsPerNode,
	}
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg.Clone() // the transport adds its ALPN protocols to it
		if streams {
			t.ForceAttemptHTTP2 = true // the dialer and TLS config are ours: ask for h2 by ALPN
		} else {
			t.TLSClientConfig.NextProtos = []string{"http/1.1"}
			t.MaxConnsPerHost = MaxConnsPerNode
		}
	}
	return &http.Client{Transport: t}
}
