package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// walctl certs makes a CA, node and client certificates that a node, its
// etcd and walctl then use for mutual TLS: walctl with the client
// certificate appends, tails and explains; without one the node refuses it
// with the reason; existing files are not overwritten.
func TestSecureWalctl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	walctl := func(args ...string) result {
		var out, errOut bytes.Buffer
		code := run(ctx, args, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
		return result{code: code, out: out.String(), errOut: errOut.String()}
	}
	for _, args := range [][]string{
		{"certs", "create-ca", "-dir", dir},
		{"certs", "create-node", "n1", "--host", "127.0.0.1,localhost", "-dir", dir},
		{"certs", "create-node", "etcd", "-host", "127.0.0.1", "-dir", dir},
		{"certs", "create-client", "alice", "-dir", dir, "-key-type", "ed25519"},
	} {
		r := walctl(args...)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r)
		require.Contains(t, r.out, "wrote ")
	}
	fi, err := os.Stat(filepath.Join(dir, "client.alice.key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	r := walctl("certs", "create-client", "alice", "-dir", dir)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "client.alice.key (give -overwrite to replace it)")
	r = walctl("certs", "create-node", "n2", "-dir", dir)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "create-node needs -host")
	r = walctl("certs", "create-node", "../x", "-host", "h", "-dir", dir)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "no valid name")
	// Names that would pass for another identity: refused, nothing written.
	for _, c := range []struct{ cmd, name, want string }{
		{"create-client", "root", "root is etcd's root user"},
		{"create-client", "streamwal-node", "etcd's users of the cluster's nodes"},
		{"create-client", "n1", "how nodes are named"},
		{"create-client", "n7", "how nodes are named"},
		{"create-client", "etcd", "a node of this name exists"},
		{"create-node", "alice", "holds a client of that name"},
		{"create-node", "root", "a reserved name"},
	} {
		args := []string{"certs", c.cmd, c.name, "-dir", dir}
		if c.cmd == "create-node" {
			args = append(args, "-host", "127.0.0.1")
		}
		r := walctl(args...)
		require.Equal(t, exitFailed, r.code, "%v: %s", args, r)
		require.Contains(t, r.errOut, c.want, "%v", args)
		if c.cmd == "create-client" {
			_, err := os.Stat(filepath.Join(dir, "client."+c.name+".crt"))
			require.ErrorIs(t, err, os.ErrNotExist)
		}
	}
	for _, f := range []struct {
		file string
		want certs.Identity
	}{{"node.n1.crt", certs.Identity{Kind: certs.Node, Name: "n1"}}, {"client.alice.crt", certs.Identity{Kind: certs.Client, Name: "alice"}}} {
		data, err := os.ReadFile(filepath.Join(dir, f.file))
		require.NoError(t, err)
		c, err := certs.Parse(data)
		require.NoError(t, err)
		id, err := certs.Identify(c)
		require.NoError(t, err)
		require.Equal(t, f.want, id, f.file)
	}

	file := func(name string) string { return filepath.Join(dir, name) }
	etcd := etcdtest.StartWith(t, etcdtest.Options{TLS: &etcdtest.TLSFiles{
		CertFile: file("node.etcd.crt"), KeyFile: file("node.etcd.key"), ClientCAFile: file("ca.crt")}})
	nodeEtcdTLS, _, err := tlsconf.Config{CAFile: file("ca.crt"), CertFile: file("node.n1.crt"), KeyFile: file("node.n1.key")}.Client()
	require.NoError(t, err)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, TLS: nodeEtcdTLS, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	server, _, err := tlsconf.Config{CertFile: file("node.n1.crt"), KeyFile: file("node.n1.key"), ClientCAFile: file("ca.crt")}.Server()
	require.NoError(t, err)
	l, err := cluster.NewLayout(etcdtest.Prefix(t) + "cluster/")
	require.NoError(t, err)
	o, err := memory.New(ctx, memory.Config{Cluster: memory.NewCluster()})
	require.NoError(t, err)
	n, err := node.New(cli, o, node.Config{ID: "n1", Root: l.Root, SessionTTL: 2 * time.Second, Backend: "memory", TLS: server})
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() {
		require.NoError(t, n.Shutdown(context.Background()))
		_ = o.Close()
	})
	h := &harness{t: t, ctx: ctx, cli: cli, layout: l}
	h.assign("ch", "n1", 1)
	v, err := cluster.Watch(ctx, cli, l, nil)
	require.NoError(t, err)
	defer v.Close()
	_, err = v.WaitFor(ctx, func(s cluster.Snapshot) bool { return s.Opened["ch"].Value.Term == 1 })
	require.NoError(t, err)

	secure := []string{"-etcd", strings.Join(etcd.Endpoints(), ","), "-root", l.Root,
		"-ca", file("ca.crt"), "-cert", file("client.alice.crt"), "-key", file("client.alice.key")}
	r = walctl(append([]string{"append", "ch", "hello"}, secure...)...)
	require.Equal(t, exitOK, r.code, "%s", r)
	r = walctl(append([]string{"tail", "ch", "-until-caught-up"}, secure...)...)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "hello")
	r = walctl(append([]string{"explain", "ch"}, secure...)...)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "healthy")

	// etcd with alice's certificate, the node without any: refused.
	noCert := []string{"-etcd", strings.Join(etcd.Endpoints(), ","), "-root", l.Root, "-ca", file("ca.crt"),
		"-etcd-cert", file("client.alice.crt"), "-etcd-key", file("client.alice.key")}
	r = walctl(append([]string{"append", "ch", "refused"}, noCert...)...)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "certificate required")
	// etcd's CA unknown to walctl (no -ca: the system's roots): the
	// reason is named.
	r = walctl("nodes", "-etcd", strings.Join(etcd.Endpoints(), ","), "-root", l.Root, "-timeout", "2s")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "certificate signed by unknown authority")
	r = walctl(append([]string{"tail", "ch", "-until-caught-up"}, secure...)...)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.NotContains(t, r.out, "refused")
}
