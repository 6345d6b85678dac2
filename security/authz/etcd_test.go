package authz_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/security/certs"
)

// TestEtcdRolesByCertificate: etcd over mutual TLS takes a client
// certificate's CN as its user, so the certificate that names a principal
// to the nodes names the same one to etcd. With the roles of
// SetupEtcdRoles: the node writes assignments; the operator writes move
// and drain requests but no assignment; the viewer reads and writes
// nothing; a certificate of no etcd user is refused.
func TestEtcdRolesByCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA(certs.Request{CommonName: "test CA"})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, "ca.crt", "ca.key", ca.Pair, false))
	server, err := ca.Issue(certs.Request{CommonName: "etcd", Kind: certs.Node, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, "etcd.crt", "etcd.key", server, false))
	srv := etcdtest.StartWith(t, etcdtest.Options{TLS: &etcdtest.TLSFiles{CertFile: filepath.Join(dir, "etcd.crt"),
		KeyFile: filepath.Join(dir, "etcd.key"), ClientCAFile: filepath.Join(dir, "ca.crt")}})
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	as := func(cn string) *clientv3.Client {
		p, err := ca.Issue(certs.Request{CommonName: cn, Kind: certs.Client})
		require.NoError(t, err)
		pair, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		require.NoError(t, err)
		cli, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: srv.Endpoints(),
			TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	root := as("root")
	users := map[string]string{"root": "root", "n1": authz.EtcdRoleNode, "alice": authz.EtcdRoleAdmin, "bob": authz.EtcdRoleReader}
	for user, role := range users {
		_, err := root.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true})
		require.NoError(t, err)
		if user == "root" {
			_, err = root.UserGrantRole(ctx, user, role)
			require.NoError(t, err)
		}
	}
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	_, err = authz.SetupEtcdRoles(ctx, root, l.Root)
	require.NoError(t, err)
	_, err = authz.SetupEtcdRoles(ctx, root, l.Root)
	require.NoError(t, err, "idempotent")
	for user, role := range users {
		if user != "root" {
			_, err := root.UserGrantRole(ctx, user, role)
			require.NoError(t, err)
		}
	}
	_, err = root.AuthEnable(ctx)
	require.NoError(t, err)

	assignment := string(cluster.Encode(cluster.Assignment{Channel: "pch-0", Node: "n1", Term: 1, State: cluster.Assigning}))
	move := string(cluster.Encode(cluster.MoveRequest{}))
	for _, tc := range []struct {
		cn                   string
		read, assign, moveOK bool
	}{
		{"n1", true, true, true},
		{"alice", true, false, true},
		{"bob", true, false, false},
		{"mallory", false, false, false}, // the CA signed it; etcd has no such user
	} {
		cli := as(tc.cn)
		check := func(what string, ok bool, err error) {
			if ok {
				require.NoError(t, err, "%s: %s", tc.cn, what)
			} else {
				require.Error(t, err, "%s: %s", tc.cn, what)
			}
		}
		_, err := cli.Get(ctx, l.Root, clientv3.WithPrefix())
		check("read the cluster", tc.read, err)
		_, err = cli.Put(ctx, l.Assignment("pch-0"), assignment)
		check("write an assignment", tc.assign, err)
		_, err = cli.Put(ctx, l.Move("pch-0"), move)
		check("request a move", tc.moveOK, err)
		_, err = cli.Put(ctx, l.Drain("n1"), string(cluster.Encode(cluster.DrainRequest{})))
		check("request a drain", tc.moveOK, err)
		_, err = cli.Put(ctx, l.Refusal("pch-0"), "{}")
		check("forge a refusal", tc.assign, err)
	}
}
