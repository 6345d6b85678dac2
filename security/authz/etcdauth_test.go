package authz_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/authz"
)

// SyncEtcdAuth on an etcd without authentication: it creates root, the
// node user and one user per principal with the role the policy implies,
// and turns authentication on; then only the right user writes each key
// range, a user without credentials does nothing, a second run changes
// nothing, and a principal dropped from the policy loses its user.
func TestSyncEtcdAuth(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pw := authz.PasswordDir(t.TempDir())
	const root = "/c/"
	pc, err := authz.Parse([]byte(`
roles:
  ops: [{actions: [admin, read], channels: ["*"]}]
  look: [{actions: [read], channels: ["pch-1"]}]
  write: [{actions: [append, admin], channels: ["pch-*"]}]
principals:
  alice: {roles: [ops]}
  bob: {roles: [look]}
  carol: {roles: [write]}
  streamwal://node/n1: {roles: [look]}
`))
	require.NoError(t, err)
	users := pc.EtcdUsers()
	require.Equal(t, map[string]string{"alice": authz.EtcdRoleAdmin, "bob": authz.EtcdRoleReader, "carol": authz.EtcdRoleReader}, users,
		"admin on every channel is etcd's admin; admin on some channels is not")

	as := func(user string) *clientv3.Client {
		cfg := etcdstore.Config{Endpoints: srv.Endpoints(), Username: user}
		if user != "" {
			p, isNew, err := pw.Password(user)
			require.NoError(t, err)
			require.False(t, isNew, "%s has a password once synced", user)
			cfg.Password = p
		}
		cli, err := etcdstore.Dial(ctx, cfg)
		require.NoError(t, err, user)
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	// Root's client before authentication is on: its credentials are
	// ignored until then.
	rootPW, _, err := pw.Password(authz.EtcdRootUser)
	require.NoError(t, err)
	admin, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: srv.Endpoints(), Username: "root", Password: rootPW})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	// A user of someone else's, with a role of no streamwal's, and a
	// node's user of a setup by hand: kept.
	_, err = admin.UserAdd(ctx, "other", "secret-of-other")
	require.NoError(t, err)
	_, err = admin.UserAdd(ctx, "node-by-hand", "secret-of-node")
	require.NoError(t, err)
	_, err = authz.SetupEtcdRoles(ctx, admin, root)
	require.NoError(t, err)
	_, err = admin.UserGrantRole(ctx, "node-by-hand", authz.EtcdRoleNode)
	require.NoError(t, err)

	rep, err := authz.SyncEtcdAuth(ctx, admin, root, users, pw)
	require.NoError(t, err)
	require.True(t, rep.Enabled)
	require.ElementsMatch(t, []string{"root", authz.EtcdNodeUser, "alice", "bob", "carol"}, rep.Created)
	require.NoError(t, authz.CheckEtcdGuarded(ctx, admin))
	for _, u := range []string{"root", authz.EtcdNodeUser, "alice", "bob"} {
		f, err := pw.File(u)
		require.NoError(t, err)
		fi, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), u)
	}

	put := func(cli *clientv3.Client, key string) error {
		_, err := cli.Put(ctx, key, "x")
		return err
	}
	node, alice, bob := as(authz.EtcdNodeUser), as("alice"), as("bob")
	require.NoError(t, put(node, root+"assignments/pch-1"))
	require.NoError(t, put(node, "/c-meta/chain/pch-1"))
	require.NoError(t, put(alice, root+"requests/move/pch-1"))
	require.True(t, errors.Is(put(alice, root+"assignments/pch-1"), rpctypes.ErrPermissionDenied))
	require.True(t, errors.Is(put(bob, root+"requests/move/pch-1"), rpctypes.ErrPermissionDenied))
	_, err = bob.Get(ctx, root, clientv3.WithPrefix())
	require.NoError(t, err, "a reader reads")
	require.True(t, errors.Is(put(node, "/elsewhere"), rpctypes.ErrPermissionDenied), "the node user is confined to the cluster's keys")

	// No credentials: nothing, even read.
	anon, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: srv.Endpoints()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = anon.Close() })
	require.Error(t, put(anon, root+"requests/move/pch-1"))
	_, err = anon.Get(ctx, root, clientv3.WithPrefix())
	require.Error(t, err)

	rep, err = authz.SyncEtcdAuth(ctx, admin, root, users, pw)
	require.NoError(t, err)
	require.Equal(t, authz.EtcdAuthReport{}, rep, "a second run changes nothing")

	// bob becomes an operator, carol leaves the policy.
	rep, err = authz.SyncEtcdAuth(ctx, admin, root, map[string]string{"alice": authz.EtcdRoleAdmin, "bob": authz.EtcdRoleAdmin}, pw)
	require.NoError(t, err)
	require.Equal(t, []string{"bob"}, rep.Updated)
	require.Equal(t, []string{"carol"}, rep.Deleted)
	require.NoError(t, put(bob, root+"requests/drain/n1"))
	got, err := admin.UserList(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"root", authz.EtcdNodeUser, "alice", "bob", "other", "node-by-hand"}, got.Users)

	// Names etcd keeps for itself are no principal's.
	_, err = authz.SyncEtcdAuth(ctx, admin, root, map[string]string{"root": authz.EtcdRoleReader}, pw)
	require.Error(t, err)
	_, err = authz.Parse([]byte("roles: {r: [{actions: [read], channels: ['*']}]}\nprincipals: {root: {roles: [r]}, streamwal-node: {roles: [r]}}\n"))
	require.ErrorIs(t, err, authz.ErrInvalidPolicy)
	require.ErrorContains(t, err, "principals.root: reserved name")
	require.ErrorContains(t, err, "principals.streamwal-node: reserved name")
}
