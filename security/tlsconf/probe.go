package tlsconf

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/cockroachdb/errors"
)

// Probe connects to addr with cfg and reports why a TLS connection to it
// fails, or nil when it succeeds. It exists for error messages: with TLS
// 1.3 a server checks the client's certificate after the client's side of
// the handshake is done, so its refusal ("certificate required", "unknown
// certificate authority", "expired certificate") reaches the client as the
// first read, and an HTTP/2 client reports only that the connection could
// not be established. Probe asks for HTTP/2 and reads the server's first
// frame (an HTTP/2 server speaks first), within timeout, so the refusal
// surfaces as the error. A server that does not negotiate HTTP/2 is only
// handshaken with.
func Probe(ctx context.Context, addr string, cfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return errors.Wrapf(err, "tls to %s", addr)
	}
	defer func() { _ = conn.Close() }()
	tc := conn.(*tls.Conn)
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		return nil
	}
	// The client preface, so the server reads and answers.
	if deadline, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(deadline)
	}
	if _, err := tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return errors.Wrapf(err, "tls to %s", addr)
	}
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // no refusal within the bound: nothing to report
		}
		return errors.Wrapf(err, "tls to %s", addr)
	}
	return nil
}
