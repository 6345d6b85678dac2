package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// A node asked to listen beyond loopback without TLS refuses to start with
// one line that says how to fix it; loopback, TLS or -insecure start.
func TestPlaintextOnNetworkRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-listen", "0.0.0.0:7070"}, "-listen 0.0.0.0:7070 is not a loopback address and TLS is off: give -tls-cert and -tls-key (walctl certs create-node makes them), or -insecure to serve plaintext anyway"},
		{[]string{"-listen", ":7070"}, "-listen :7070 is not a loopback address"},
		{[]string{"-listen", "10.1.2.3:7070", "-etcd", "http://10.1.2.3:2379"}, "-listen 10.1.2.3:7070 is not a loopback address"},
		{[]string{"-etcd-listen", "0.0.0.0:2379"}, "-etcd-listen 0.0.0.0:2379 is not a loopback address"},
		{[]string{"-insecure", "-tls-cert", "c", "-tls-key", "k"}, "-insecure and -tls-cert contradict each other"},
		{[]string{"-tls-cert", "c"}, "-tls-cert c is given without -tls-key"},
		{[]string{"-tls-client-ca", "ca"}, "-tls-client-ca needs -tls-cert and -tls-key"},
		{[]string{"-tls-cert", "c", "-tls-key", "k", "-tls-client-ca", "ca", "-tls-client-cert-optional"}, "-tls-client-cert-optional needs -tls-client-ca and -authz"},
		{[]string{"-tls-cert", "c", "-tls-key", "k", "-etcd-listen", "0.0.0.0:2379"}, "the embedded etcd member would take any client: give -tls-client-ca"},
	} {
		_, _, err := parseFlags(c.args)
		require.Error(t, err, "%v", c.args)
		require.Contains(t, err.Error(), c.want)
	}
	for _, args := range [][]string{
		nil, // the README's one node
		{"-listen", "localhost:7070"},
		{"-listen", "[::1]:7070"},
		{"-listen", "0.0.0.0:7070", "-insecure"},
		{"-listen", "0.0.0.0:7070", "-tls-cert", "c", "-tls-key", "k", "-tls-client-ca", "ca", "-etcd-listen", "0.0.0.0:2379"},
		{"-listen", "0.0.0.0:7070", "-tls-cert", "c", "-tls-key", "k"},
		{"-tls-cert", "c", "-tls-key", "k", "-tls-client-ca", "ca", "-tls-client-cert-optional", "-authz", "policy.yaml"},
		{"-listen", "0.0.0.0:7070", "-etcd", "http://10.0.0.1:2379", "-etcd-listen", "0.0.0.0:2379", "-insecure"},
	} {
		_, _, err := parseFlags(args)
		require.NoError(t, err, "%v", args)
	}
}

// Unusable TLS files stop the node before it starts anything, naming the
// flag, the file and the reason.
func TestTLSMisconfigurationRefused(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	pair, err := ca.Issue(certs.Request{CommonName: "n1", Kind: certs.Node, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, "n1.crt", "n1.key", pair, false))
	other, err := ca.Issue(certs.Request{CommonName: "n2", Kind: certs.Node, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, "n2.crt", "n2.key", other, false))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644))
	crt, key := filepath.Join(dir, "n1.crt"), filepath.Join(dir, "n1.key")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", crt, "-tls-key", filepath.Join(dir, "nope.key")}, "-tls-key " + filepath.Join(dir, "nope.key") + ": cannot read the key"},
		{[]string{"-tls-cert", crt, "-tls-key", filepath.Join(dir, "n2.key")}, "-tls-key " + filepath.Join(dir, "n2.key") + ": not the key of the certificate -tls-cert " + crt},
		{[]string{"-tls-cert", crt, "-tls-key", key, "-tls-client-ca", filepath.Join(dir, "empty")}, "-tls-client-ca " + filepath.Join(dir, "empty") + ": holds no PEM certificate"},
		{[]string{"-tls-cert", crt, "-tls-key", key, "-etcd", "https://127.0.0.1:1", "-etcd-ca", filepath.Join(dir, "empty")}, "-etcd-ca " + filepath.Join(dir, "empty") + ": holds no PEM certificate"},
		{[]string{"-etcd", "http://127.0.0.1:1", "-etcd-user", "root"}, "-etcd-user root needs a password: -etcd-password-file or $STREAMWAL_ETCD_PASSWORD"},
	} {
		data := t.TempDir()
		p, _, err := parseFlags(append(c.args, "-data", data))
		require.NoError(t, err)
		err = run(context.Background(), p, slog.New(slog.DiscardHandler))
		require.Error(t, err, "%v", c.args)
		require.Contains(t, err.Error(), c.want)
		if errors.Is(err, tlsconf.ErrInvalid) {
			entries, err := os.ReadDir(data)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing started, nothing written")
		}
	}
}
