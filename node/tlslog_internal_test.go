package node

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Each reason net/http and crypto/tls give for a failed handshake maps to
// its label; other server log lines are not counted.
func TestServerLogCountsHandshakes(t *testing.T) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"reason"})
	l := newServerLog(slog.New(slog.DiscardHandler), refused, nil)
	for line, reason := range map[string]string{
		"http: TLS handshake error from 127.0.0.1:5555: tls: client didn't provide a certificate":                                             "no_client_certificate",
		"http: TLS handshake error from 127.0.0.1:5555: remote error: tls: certificate required":                                              "no_client_certificate",
		"http: TLS handshake error from 127.0.0.1:5555: tls: failed to verify certificate: x509: certificate has expired or is not yet valid": "expired_certificate",
		"http: TLS handshake error from 127.0.0.1:5555: tls: failed to verify certificate: x509: certificate signed by unknown authority":     "unknown_authority",
		"http: TLS handshake error from [::1]:5555: client sent an HTTP request to an HTTPS server":                                           "plaintext_client",
		"http: TLS handshake error from 127.0.0.1:5555: EOF":                                                                                  "closed_by_client",
		"http: TLS handshake error from 127.0.0.1:5555: something new":                                                                        "other",
	} {
		before := testutil.ToFloat64(refused.WithLabelValues(reason))
		l.Print(line)
		require.Equal(t, before+1, testutil.ToFloat64(refused.WithLabelValues(reason)), line)
	}
	l.Print("http: superfluous response.WriteHeader call")
	require.Equal(t, 6, testutil.CollectAndCount(refused), "one series per reason, none for the other line")
}
