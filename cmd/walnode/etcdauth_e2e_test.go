package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// buildWalctl builds walctl into a temporary directory.
func buildWalctl(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "walctl")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/streamwal/streamwal/cmd/walctl").CombinedOutput()
	require.NoError(t, err, "build walctl: %s", out)
	return bin
}

// freeAddr is a loopback address nothing listens on (a port the kernel
// just handed out).
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// A walnode with -authz embeds an etcd member whose authentication is on
// from the first start, with a user per principal: a reader (with its
// password or by certificate alone), a principal the policy does not name
// and a certificate named root try every admin action through walctl and
// straight against etcd, and each is refused with nothing written; the
// operator's user moves a channel. A principal added to the policy file
// gets its user without a restart, and SIGHUP does not stop the node.
func TestEtcdGuardedByAuthz(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a walnode process")
	}
	walctl := buildWalctl(t)
	dir := certDir(t, []string{"n1"}, []string{"reader", "ops", "mallory", "root", "late"})
	file := func(name string) string { return filepath.Join(dir, name) }
	etcdAddr := freeAddr(t)
	c := &e2eCluster{t: t, root: "/guarded/", etcd: []string{"https://" + etcdAddr}, dir: t.TempDir(), nodes: map[string]*child{}}
	policy := filepath.Join(c.dir, "policy.yaml")
	const policyText = `
roles:
  look: [{actions: [read], channels: ["*"]}]
  ops:  [{actions: [read, admin], channels: ["*"]}]
principals:
  reader: {roles: [look]}
  ops:    {roles: [ops]}
`
	require.NoError(t, os.WriteFile(policy, []byte(policyText), 0o600))
	data := filepath.Join(c.dir, "n1")
	c.nodes["n1"] = &child{id: "n1", log: filepath.Join(c.dir, "n1.log"), args: []string{
		"-id", "n1", "-listen", "127.0.0.1:0", "-etcd-listen", etcdAddr, "-root", c.root, "-data", data,
		"-log-level", "debug", "-tls-cert", file("node.n1.crt"), "-tls-key", file("node.n1.key"), "-tls-client-ca", file(certs.CACert),
		"-authz", policy,
	}}
	c.start("n1")
	t.Cleanup(func() {
		c.stop("n1", syscall.SIGTERM)
		if t.Failed() {
			c.dumpLogs()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	passwords := etcdAuthDir(data)
	passwordFile := func(user string) string {
		f, err := passwords.File(user)
		require.NoError(t, err)
		return f
	}
	tlsFor := func(principal string) *tls.Config {
		cfg := tlsconf.Config{CAFile: file(certs.CACert)}
		if principal != "" {
			cfg.CertFile, cfg.KeyFile = certs.ClientFiles(principal)
			cfg.CertFile, cfg.KeyFile = file(cfg.CertFile), file(cfg.KeyFile)
		}
		out, _, err := cfg.Client()
		require.NoError(t, err)
		return out
	}
	// as dials etcd with principal's certificate, and as user when one is
	// given (with its password from the node's -data).
	as := func(principal, user string) *clientv3.Client {
		cfg := etcdstore.Config{Endpoints: c.etcd, TLS: tlsFor(principal)}
		if user != "" {
			pw, err := os.ReadFile(passwordFile(user))
			require.NoError(t, err)
			cfg.Username, cfg.Password = user, strings.TrimSpace(string(pw))
		}
		var cli *clientv3.Client
		require.Eventually(t, func() bool {
			dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
			defer dcancel()
			var err error
			cli, err = etcdstore.Dial(dctx, cfg)
			return err == nil
		}, time.Minute, 50*time.Millisecond, "etcd never answered %s/%s", principal, user)
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	// The operator's password exists once the node made its user.
	require.Eventually(t, func() bool {
		_, err := os.Stat(passwordFile("ops"))
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the node never made the operator's etcd user")
	ops := as("ops", "ops")
	cl, err := client.New(ctx, client.Config{Etcd: ops, Root: c.root, TLS: tlsFor("ops")})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c.cli, c.view, c.ecli = cl, cl.View(), ops
	snap := c.waitAssigned(4)
	var channel string
	for ch := range snap.Assignments {
		channel = ch
	}
	st, err := ops.AuthStatus(ctx)
	require.NoError(t, err)
	require.True(t, st.Enabled, "authentication on from the first start")

	// What the cluster holds, to compare after the refused attempts.
	rootCli := as("ops", authz.EtcdRootUser)
	keys := func() map[string]string {
		out := map[string]string{}
		for _, prefix := range []string{c.root, strings.TrimSuffix(c.root, "/") + "-meta/"} {
			resp, err := rootCli.Get(ctx, prefix, clientv3.WithPrefix())
			require.NoError(t, err)
			for _, kv := range resp.Kvs {
				// Left out: what the node itself rewrites meanwhile (its
				// registration, the retention floors).
				if !strings.Contains(string(kv.Key), "/nodes/") && !strings.HasSuffix(string(kv.Key), "/floor") {
					out[string(kv.Key)] = string(kv.Value)
				}
			}
		}
		return out
	}
	before := keys()

	runWalctl := func(args ...string) (int, string) {
		cmd := exec.CommandContext(ctx, walctl, append(args, "-etcd", c.etcd[0], "-root", c.root, "-timeout", "10s")...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return code, out.String()
	}
	admin := [][]string{
		{"move", channel}, {"drain", "n1"}, {"undrain", "n1"}, {"migrate", channel, "local", "-cancel"},
		{"checkpoints", channel, "-drop", "someone"}, {"etcd-roles"},
	}
	for _, who := range []struct{ cert, user string }{{"reader", "reader"}, {"reader", ""}, {"mallory", ""}, {"root", ""}} {
		creds := []string{"-ca", file(certs.CACert), "-cert", file("client." + who.cert + ".crt"), "-key", file("client." + who.cert + ".key")}
		if who.user != "" {
			creds = append(creds, "-etcd-user", who.user, "-etcd-password-file", passwordFile(who.user))
		}
		for _, a := range admin {
			code, out := runWalctl(append(append([]string{}, a...), creds...)...)
			require.NotEqual(t, 0, code, "%s/%s: walctl %v: %s", who.cert, who.user, a, out)
		}
		cli := as(who.cert, who.user)
		for _, key := range []string{c.root + "requests/move/" + channel, c.root + "assignments/" + channel, "/elsewhere",
			strings.TrimSuffix(c.root, "/") + "-meta/chain/" + channel} {
			_, err := cli.Put(ctx, key, "x")
			require.Error(t, err, "%s/%s: put %s", who.cert, who.user, key)
		}
		_, err := cli.Delete(ctx, c.root, clientv3.WithPrefix())
		require.Error(t, err, "%s/%s: delete", who.cert, who.user)
		_, err = cli.UserAdd(ctx, "intruder", "pw")
		require.Error(t, err, "%s/%s: user add", who.cert, who.user)
		_, err = cli.AuthDisable(ctx)
		require.Error(t, err, "%s/%s: auth disable", who.cert, who.user)
		if who.user == "" {
			_, err := cli.Get(ctx, c.root, clientv3.WithPrefix())
			require.Error(t, err, "%s without an etcd user reads nothing", who.cert)
		}
	}
	require.Equal(t, before, keys(), "nothing written by the refused attempts")
	resp, err := rootCli.Get(ctx, "/elsewhere")
	require.NoError(t, err)
	require.Zero(t, resp.Count)

	// The operator reads the cluster through walctl with its user.
	code, out := runWalctl("channels", "-ca", file(certs.CACert), "-cert", file("client.ops.crt"), "-key", file("client.ops.key"),
		"-etcd-user", "ops", "-etcd-password-file", passwordFile("ops"))
	require.Equal(t, 0, code, out)

	// A principal added to the file gets its user, without a signal; a
	// SIGHUP then reloads and the node goes on.
	require.NoError(t, os.WriteFile(policy, []byte(policyText+"  late:   {roles: [look]}\n"), 0o600))
	require.Eventually(t, func() bool {
		_, err := os.Stat(passwordFile("late"))
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the new principal never got its etcd user")
	late := as("late", "late")
	_, err = late.Get(ctx, c.root, clientv3.WithPrefix())
	require.NoError(t, err)
	require.NoError(t, c.nodes["n1"].cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(c.nodes["n1"].log)
		return strings.Count(string(data), "policy reloaded") >= 2
	}, time.Minute, 20*time.Millisecond, "SIGHUP did not reload the policy")
	select {
	case <-c.nodes["n1"].done:
		t.Fatal("SIGHUP stopped the node")
	default:
	}
	require.NoError(t, cl.Read(ctx, channel, client.ReadOptions{UntilCaughtUp: true}, func(*streamwalv1.Delivered) error { return nil }),
		"the node still serves")
}

// A node with -authz refuses an etcd without authentication, naming the
// command that turns it on, unless -etcd-guarded-elsewhere says it is
// guarded otherwise.
func TestExternalEtcdUnguarded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs walnode processes")
	}
	srv := etcdtest.Start(t)
	c := &e2eCluster{t: t, root: etcdtest.Prefix(t) + "cluster/", etcd: srv.Endpoints(), dir: t.TempDir(), nodes: map[string]*child{}}
	policy := filepath.Join(c.dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("roles: {r: [{actions: [read], channels: ['*']}]}\nprincipals: {a: {roles: [r]}}\n"), 0o600))
	args := []string{"-id", "n1", "-listen", "127.0.0.1:0", "-etcd", srv.Endpoints()[0], "-root", c.root,
		"-data", filepath.Join(c.dir, "n1"), "-authz", policy}
	c.nodes["n1"] = &child{id: "n1", log: filepath.Join(c.dir, "n1.log"), args: args}
	c.start("n1")
	<-c.nodes["n1"].done
	require.NotZero(t, c.nodes["n1"].cmd.ProcessState.ExitCode())
	logText, err := os.ReadFile(c.nodes["n1"].log)
	require.NoError(t, err)
	require.Contains(t, string(logText), "whose authentication is off")
	require.Contains(t, string(logText), "walctl -etcd "+srv.Endpoints()[0]+" etcd-auth -authz "+policy)

	c.nodes["n1"].args = append(args, "-etcd-guarded-elsewhere")
	c.start("n1")
	t.Cleanup(func() { c.stop("n1", syscall.SIGTERM) })
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(c.nodes["n1"].log)
		return strings.Contains(string(data), "walnode ready")
	}, time.Minute, 20*time.Millisecond, "the node did not start with -etcd-guarded-elsewhere")
	data, _ := os.ReadFile(c.nodes["n1"].log)
	require.Contains(t, string(data), "-etcd-guarded-elsewhere: etcd's authentication is off")
}

// SIGHUP never stops a node, -authz or not: it reloads what can be
// reloaded and the node goes on serving.
func TestSIGHUPWithoutAuthz(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a walnode process")
	}
	c := newE2ECluster(t, 1, 10*time.Second)
	snap := c.waitAssigned(6)
	for i := 0; i < 3; i++ {
		require.NoError(t, c.nodes["n1"].cmd.Process.Signal(syscall.SIGHUP))
	}
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(c.nodes["n1"].log)
		return strings.Count(string(data), "SIGHUP: no -authz policy to reload") >= 1
	}, time.Minute, 20*time.Millisecond, "SIGHUP not handled")
	select {
	case <-c.nodes["n1"].done:
		t.Fatal("SIGHUP stopped the node")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ch := range snap.Assignments {
		_, err := c.cli.Append(ctx, ch, client.Message{Payload: []byte("after SIGHUP")}, client.Options{})
		require.NoError(t, err, ch)
	}
}
