package node

import (
	"log"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// tlslog.go: the API server's own error log. net/http reports a refused
// TLS handshake only there, as a line ("http: TLS handshake error from
// <peer>: <reason>"); the node logs each once at Warn and counts it by
// reason, so a client turned away before any request (no certificate, an
// unknown CA, an expired certificate, plaintext to a TLS port) shows in
// streamwal_node_tls_handshakes_refused_total like a refused request does
// in streamwal_authz_refused_total.

// handshakeReasons maps what a refused handshake's error says to the
// metric's reason label, first match wins.
var handshakeReasons = []struct{ says, reason string }{
	{"certificate required", "no_client_certificate"},
	{"didn't provide a certificate", "no_client_certificate"},
	{"expired", "expired_certificate"},
	{"not yet valid", "expired_certificate"},
	{"unknown certificate authority", "unknown_authority"},
	{"signed by unknown authority", "unknown_authority"},
	{"bad certificate", "bad_certificate"},
	{"first record does not look like a TLS handshake", "plaintext_client"},
	{"client sent an HTTP request to an HTTPS server", "plaintext_client"},
	{"EOF", "closed_by_client"},
	{"connection reset", "closed_by_client"},
}

// handshakeReason returns the reason label of a refused handshake's error
// text.
func handshakeReason(text string) string {
	for _, r := range handshakeReasons {
		if strings.Contains(text, r.says) {
			return r.reason
		}
	}
	return "other"
}

// serverLog writes the API server's error log lines to the node's logger:
// refused handshakes at Warn, counted by reason; anything else at Info.
type serverLog struct {
	log     *slog.Logger
	refused *prometheus.CounterVec
	// failed, when set, is told the peer of each refused handshake
	// (handshakeBudget.failed).
	failed func(peer string)
}

func (s serverLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	const marker = "TLS handshake error from "
	i := strings.Index(line, marker)
	if i < 0 {
		s.log.Info(line)
		return len(p), nil
	}
	peer, reason := line[i+len(marker):], ""
	if j := strings.Index(peer, ": "); j >= 0 {
		peer, reason = peer[:j], peer[j+2:]
	}
	label := handshakeReason(reason)
	s.refused.WithLabelValues(label).Inc()
	if s.failed != nil {
		s.failed(peerHost(peer))
	}
	s.log.Warn("tls handshake refused", "peer", peer, "reason", label, "error", reason)
	return len(p), nil
}

// newServerLog returns the *log.Logger an http.Server takes as ErrorLog.
func newServerLog(logger *slog.Logger, refused *prometheus.CounterVec, failed func(peer string)) *log.Logger {
	return log.New(serverLog{log: logger, refused: refused, failed: failed}, "", 0)
}
