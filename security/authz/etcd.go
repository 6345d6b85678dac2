package authz

import (
	"context"
	"strings"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Names of the etcd roles that guard a cluster's keys (package doc,
// "Administrative actions").
const (
	EtcdRoleNode   = "streamwal-node"
	EtcdRoleAdmin  = "streamwal-admin"
	EtcdRoleReader = "streamwal-reader"
)

// EtcdPermission is one key range of an etcd role: every key with Prefix.
type EtcdPermission struct {
	Type   clientv3.PermissionType // clientv3.PermRead, PermWrite or PermReadWrite
	Prefix string
}

// EtcdRole is an etcd role with its key ranges.
type EtcdRole struct {
	Name        string
	Permissions []EtcdPermission
}

// EtcdRoles returns the roles that guard the keys of the cluster under
// root (cluster.Layout.Root, ending in "/"), and its channel pool's under
// root without its slash plus "-meta/" (where walnode keeps it):
//
//	streamwal-node    readwrite <root>, readwrite <root>-meta/
//	streamwal-admin   read <root>, readwrite <root>requests/move/, <root>requests/drain/,
//	                  <root>requests/migrate/, <root>-meta/chain/ (walctl migrate -cancel
//	                  cancels a pending migration in the channel's chain) and
//	                  <root>-meta/checkpoints/ (walctl checkpoints -drop drops a consumer)
//	streamwal-reader  read <root>, read <root>-meta/chain/ (the channels' backends) and
//	                  <root>-meta/checkpoints/ (the consumers' checkpoints)
//
// The roles are named alike for every root: give clusters that share an
// etcd users of their own, not these roles for both.
func EtcdRoles(root string) ([]EtcdRole, error) {
	if !strings.HasSuffix(root, "/") || root == "/" {
		return nil, errors.Newf("authz: etcd roles: root %q must end with / and not be /", root)
	}
	meta := strings.TrimSuffix(root, "/") + "-meta/"
	return []EtcdRole{
		{Name: EtcdRoleNode, Permissions: []EtcdPermission{
			{clientv3.PermissionType(clientv3.PermReadWrite), root},
			{clientv3.PermissionType(clientv3.PermReadWrite), meta},
		}},
		{Name: EtcdRoleAdmin, Permissions: []EtcdPermission{
			{clientv3.PermissionType(clientv3.PermRead), root},
			{clientv3.PermissionType(clientv3.PermReadWrite), root + "requests/move/"},
			{clientv3.PermissionType(clientv3.PermReadWrite), root + "requests/drain/"},
			{clientv3.PermissionType(clientv3.PermReadWrite), root + "requests/migrate/"},
			{clientv3.PermissionType(clientv3.PermReadWrite), meta + "chain/"},
			{clientv3.PermissionType(clientv3.PermReadWrite), meta + "checkpoints/"},
		}},
		{Name: EtcdRoleReader, Permissions: []EtcdPermission{
			{clientv3.PermissionType(clientv3.PermRead), root},
			{clientv3.PermissionType(clientv3.PermRead), meta + "chain/"},
			{clientv3.PermissionType(clientv3.PermRead), meta + "checkpoints/"},
		}},
	}, nil
}

// SetupEtcdRoles creates the roles of EtcdRoles(root) with cli (a root
// user's client once etcd's authentication is on) and grants them their
// key ranges. It is idempotent: a role that exists gets the ranges again.
// It creates no user and does not turn authentication on (etcdctl user
// add, user grant-role, auth enable; the README shows them).
func SetupEtcdRoles(ctx context.Context, cli *clientv3.Client, root string) ([]EtcdRole, error) {
	roles, err := EtcdRoles(root)
	if err != nil {
		return nil, err
	}
	for _, r := range roles {
		if _, err := cli.RoleAdd(ctx, r.Name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			return nil, errors.Wrapf(err, "authz: etcd role %s", r.Name)
		}
		for _, p := range r.Permissions {
			if _, err := cli.RoleGrantPermission(ctx, r.Name, p.Prefix, clientv3.GetPrefixRangeEnd(p.Prefix), p.Type); err != nil {
				return nil, errors.Wrapf(err, "authz: etcd role %s: grant %s on %s", r.Name, p.Type, p.Prefix)
			}
		}
	}
	return roles, nil
}
