package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/authz"
)

// secretFile writes a secret into a file of the test, for the -*-file
// flags.
func secretFile(t *testing.T, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, []byte(secret+"\n"), 0o600))
	return path
}

// TestAuthorization: a cluster whose etcd has authentication on, with the
// roles of walctl etcd-roles, and whose nodes have a policy. A viewer (etcd
// streamwal-reader, read token) reads but can neither append, move nor
// drain; an appender (no etcd role, append token) appends but cannot move;
// an operator (etcd streamwal-admin) can move, drain and undrain. The same
// holds when each goes straight at etcd with its own credentials; and
// nobody but the nodes writes an assignment.
func TestAuthorization(t *testing.T) {
	es := etcdtest.Start(t) // authentication is server-wide: a server of its own
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	root := etcdtest.Client(t, es.Endpoints())

	passwords := map[string]string{}
	for _, user := range []string{"root", "node", "operator", "viewer", "appender"} {
		passwords[user] = user + "-password"
		_, err := root.UserAdd(ctx, user, passwords[user])
		require.NoError(t, err)
	}
	_, err := root.UserGrantRole(ctx, "root", "root")
	require.NoError(t, err)

	tokens, hashes := map[string]string{}, map[string]string{}
	for _, who := range []string{"appender", "viewer"} {
		tokens[who], hashes[who], err = authz.NewToken(nil)
		require.NoError(t, err)
	}
	pc, err := authz.Parse(fmt.Appendf(nil, `
roles:
  producer: [{actions: [append], channels: ["pch-*"]}]
  reader:   [{actions: [read], channels: ["*"]}]
principals:
  appender: {roles: [producer], tokens: [%s]}
  viewer:   {roles: [reader], tokens: [%s]}
`, hashes["appender"], hashes["viewer"]))
	require.NoError(t, err)
	policy, err := authz.Compile(pc)
	require.NoError(t, err)

	// The roles, through walctl, before authentication is on.
	setup := newHarnessOn(t, root, es.Endpoints(), "")
	r := setup.walctl("etcd-roles")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, authz.EtcdRoleAdmin+"   readwrite "+setup.layout.Root+"requests/move/*")
	for user, role := range map[string]string{"node": authz.EtcdRoleNode, "operator": authz.EtcdRoleAdmin, "viewer": authz.EtcdRoleReader} {
		_, err := root.UserGrantRole(ctx, user, role)
		require.NoError(t, err)
	}
	setup.view.Close()
	_, err = root.AuthEnable(ctx)
	require.NoError(t, err)

	as := func(user string) *clientv3.Client {
		cli, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: es.Endpoints(), Username: user, Password: passwords[user]})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	h := newHarnessOn(t, as("node"), es.Endpoints(), setup.layout.Root) // the root the roles were made for
	h.policy = policy
	h.startNode("n1")
	h.startNode("n2")
	h.startCoordinator("pch-0", "pch-1")

	// walctlAs runs walctl with user's etcd credentials and token.
	walctlAs := func(user string, args ...string) result {
		args = append(args, "-etcd-user", user, "-etcd-password-file", secretFile(t, passwords[user]))
		if tok, ok := tokens[user]; ok {
			args = append(args, "-token-file", secretFile(t, tok))
		}
		return h.walctl(args...)
	}
	owner := h.owner("pch-0")
	other := map[string]string{"n1": "n2", "n2": "n1"}[owner]

	// The viewer looks and reads, and nothing more.
	r = walctlAs("viewer", "channels")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "pch-0")
	for _, args := range [][]string{{"move", "pch-0", other}, {"drain", owner}} {
		r = walctlAs("viewer", args...)
		require.Equal(t, exitFailed, r.code, "viewer %v: %s", args, r)
		require.Contains(t, r.errOut, "permission denied", "viewer %v", args)
	}
	r = walctlAs("viewer", "append", "pch-0", "from-viewer")
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, `principal "viewer" may not append channel "pch-0"`)

	// The appender appends (it reads the assignments with the viewer's
	// etcd user: a client needs read on the root), and cannot move.
	appendAs := func(args ...string) result {
		args = append(args, "-etcd-user", "viewer", "-etcd-password-file", secretFile(t, passwords["viewer"]),
			"-token-file", secretFile(t, tokens["appender"]))
		return h.walctl(args...)
	}
	r = appendAs("append", "pch-0", "m1", "m2")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = appendAs("tail", "pch-0", "-until-caught-up")
	require.Equal(t, exitFailed, r.code, "append is not read: %s", r)
	require.Contains(t, r.errOut, "permission denied")
	for _, args := range [][]string{{"move", "pch-0", other}, {"drain", owner}, {"channels"}} {
		r = walctlAs("appender", args...)
		require.Equal(t, exitFailed, r.code, "appender %v: %s", args, r)
		require.Contains(t, r.errOut, "permission denied", "appender %v", args)
	}
	r = walctlAs("viewer", "tail", "pch-0", "-until-caught-up")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "m1")
	require.Contains(t, r.out, "m2")
	require.NotContains(t, r.out, "from-viewer")

	// The operator moves, drains and undrains.
	r = walctlAs("operator", "move", "pch-0", other)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Equal(t, other, h.owner("pch-0"))
	r = walctlAs("operator", "drain", other)
	require.Equal(t, exitOK, r.code, "%s", r)
	r = walctlAs("viewer", "undrain", other)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, "permission denied")
	r = walctlAs("operator", "undrain", other)
	require.Equal(t, exitOK, r.code, "%s", r)

	// Straight at etcd, with each one's own credentials.
	move := string(cluster.Encode(cluster.MoveRequest{To: owner}))
	assignment := string(cluster.Encode(cluster.Assignment{Channel: "pch-0", Node: owner, Term: 99, State: cluster.Assigning, Since: time.Now()}))
	for user, allowed := range map[string]bool{"viewer": false, "appender": false, "operator": true} {
		cli := as(user)
		_, err := cli.Put(ctx, h.layout.Move("pch-9"), move)
		if allowed {
			require.NoError(t, err, user)
			_, err = cli.Delete(ctx, h.layout.Move("pch-9"))
			require.NoError(t, err)
		} else {
			require.ErrorContains(t, err, "permission denied", user)
		}
		_, err = cli.Put(ctx, h.layout.Assignment("pch-0"), assignment)
		require.ErrorContains(t, err, "permission denied", "%s may not write an assignment (bump a term)", user)
		_, err = cli.Put(ctx, h.layout.Node("n9"), "{}")
		require.ErrorContains(t, err, "permission denied", "%s may not register a node", user)
	}
	s, _ := h.view.Snapshot()
	require.Less(t, s.Assignments["pch-0"].Value.Term, int64(99))
	require.False(t, strings.Contains(fmt.Sprint(s.Nodes), "n9"))
}

// walctl token create needs no cluster: the token once, then the line for
// the policy, which loads.
func TestTokenCreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut strings.Builder
	code := run(ctx, []string{"token", "create", "-etcd", "http://127.0.0.1:1"}, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
	require.Equal(t, exitOK, code, "%s", errOut.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	require.True(t, strings.HasPrefix(lines[0], authz.TokenPrefix))
	require.Equal(t, authz.HashToken(lines[0]), lines[1])
	require.NotContains(t, errOut.String(), lines[0])
	_, err := authz.Parse([]byte("roles:\n  r: [{actions: [read], channels: ['*']}]\nprincipals:\n  p: {roles: [r], tokens: [" + lines[1] + "]}\n"))
	require.NoError(t, err)

	code = run(ctx, []string{"token", "frob"}, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
	require.Equal(t, exitFailed, code)
	errOut.Reset()
	code = run(ctx, []string{"channels", "-etcd-user", "u"}, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut.String(), "-etcd-user needs -etcd-password-file")
}

// walctl policy checks a file as walnode loads it, and answers one
// decision.
func TestPolicyCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	walctl := func(args ...string) result {
		var out, errOut strings.Builder
		code := run(ctx, args, env{in: strings.NewReader(""), out: &out, errOut: &errOut})
		return result{code: code, out: out.String(), errOut: errOut.String()}
	}
	good := secretFile(t, "roles:\n  w: [{actions: [append], channels: [\"orders-*\"]}]\n  r: [{actions: [read], channels: [\"*\"]}]\n"+
		"principals:\n  alice: {roles: [w]}\n  bob: {roles: [r], tokens: ["+authz.HashToken("x")+"]}\n")
	r := walctl("policy", good)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "2 roles, 2 principals, 1 token hashes")
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"alice", "append", "orders-1"}, exitOK, "allowed: alice append orders-1"},
		{[]string{"alice", "append", "other"}, exitFailed, "denied: alice append other"},
		{[]string{"alice", "read", "orders-1"}, exitFailed, "denied"},
		{[]string{"bob", "read", "*"}, exitOK, "allowed: bob read *"},
		{[]string{"carol", "read", "x"}, exitFailed, "denied"},
	} {
		r := walctl(append([]string{"policy", good}, tc.args...)...)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.args, r)
		require.Contains(t, r.out, tc.out, "%v", tc.args)
	}
	r = walctl("policy", good, "carol", "read", "x")
	require.Contains(t, r.errOut, "the policy does not name the principal")
	r = walctl("policy", good, "alice", "write", "x")
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.errOut, `unknown action "write"`)
	bad := secretFile(t, "principals:\n  a: {roles: [nope]}\n")
	r = walctl("policy", bad)
	require.Equal(t, exitFailed, r.code, "%s", r)
	require.Contains(t, r.errOut, bad+`:2: principals.a.roles[0]: unknown role "nope"`)
}

// walctl etcd-auth on an etcd without authentication: it turns it on with
// root, the node user and one user per principal, passwords in
// -passwords; run again as root it changes nothing; the policy's reader
// looks but cannot move, and no credentials do nothing.
func TestEtcdAuth(t *testing.T) {
	es := etcdtest.Start(t) // authentication is server-wide: a server of its own
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	anon := etcdtest.Client(t, es.Endpoints())
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte(`
roles:
  ops:  [{actions: [admin, read], channels: ["*"]}]
  look: [{actions: [read], channels: ["*"]}]
principals:
  operator: {roles: [ops]}
  viewer:   {roles: [look]}
`), 0o600))
	passwords := filepath.Join(dir, "passwords")
	h := newHarnessOn(t, anon, es.Endpoints(), "")
	r := h.walctl("etcd-auth")
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.errOut, "etcd-auth needs -authz <policy file> and -passwords <directory>")
	r = h.walctl("etcd-auth", "-authz", policy, "-passwords", passwords)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "authentication on (just now)")
	h.view.Close()

	asRoot := []string{"-etcd-user", "root", "-etcd-password-file", filepath.Join(passwords, "root.password")}
	r = h.walctl(append([]string{"etcd-auth", "-authz", policy, "-passwords", passwords}, asRoot...)...)
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.out, "created [], updated [], deleted []; authentication on\n")

	r = h.walctl("channels")
	require.Equal(t, exitFailed, r.code, "no credentials: %s", r)
	viewer := []string{"-etcd-user", "viewer", "-etcd-password-file", filepath.Join(passwords, "viewer.password")}
	r = h.walctl(append([]string{"channels"}, viewer...)...)
	require.Equal(t, exitOK, r.code, "%s", r)
	_, err := anon.Put(ctx, h.layout.Root+"requests/drain/n1", "x")
	require.Error(t, err)
	fi, err := os.Stat(filepath.Join(passwords, authz.EtcdNodeUser+".password"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}
