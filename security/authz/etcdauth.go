package authz

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/security/certs"
)

// etcdauth.go: turning an etcd's authentication on, with the users a
// policy implies, and keeping them in step with it.

// Users of etcd that SyncEtcdAuth keeps besides the policy's principals.
// Both names are reserved: no principal may take them (Config.Validate).
const (
	// EtcdRootUser is etcd's root: it administers users and roles.
	EtcdRootUser = "root"
	// EtcdNodeUser is the user nodes and coordinators reach etcd as (role
	// EtcdRoleNode).
	EtcdNodeUser = "streamwal-node"
)

// reservedPrincipal reports whether a principal's name is taken by one of
// etcd's users that are no principal's.
func reservedPrincipal(name string) bool {
	return name == EtcdRootUser || strings.HasPrefix(name, "streamwal-")
}

// EtcdUsers are the etcd users c implies, each with its one role: every
// principal is a user (clients look up channel owners in etcd, so each
// needs at least EtcdRoleReader), and one that holds admin on every
// channel ("*") is EtcdRoleAdmin, which may also write walctl's requests.
// A node's principal (streamwal://node/<name>) is no etcd user: nodes
// reach etcd as EtcdNodeUser.
func (c Config) EtcdUsers() map[string]string {
	out := make(map[string]string, len(c.Principals))
	for name, b := range c.Principals {
		if strings.HasPrefix(name, certs.IdentityScheme+"://") {
			continue // a node's certificate (PrincipalName): nodes reach etcd as EtcdNodeUser
		}
		role := EtcdRoleReader
		for _, r := range b.Roles {
			for _, g := range c.Roles[r] {
				if slices.Contains(g.Actions, ActionAdmin) && slices.Contains(g.Channels, "*") {
					role = EtcdRoleAdmin
				}
			}
		}
		out[name] = role
	}
	return out
}

// EtcdPasswords gives each etcd user its password.
type EtcdPasswords interface {
	// Password returns user's password; isNew says it was made just now,
	// so that etcd does not know it yet.
	Password(user string) (password string, isNew bool, err error)
}

// PasswordDir keeps one password per user in a directory, as the file
// <user>.password (mode 0600, the directory 0700), made from 32 random
// bytes the first time a user's password is asked for. Its files are what
// operators hand to users (walctl -etcd-user <user> -etcd-password-file
// <file>).
type PasswordDir string

// userFile is what a user's name may be to name its file.
var userFile = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

// File is the path of user's password file.
func (d PasswordDir) File(user string) (string, error) {
	if !userFile.MatchString(user) {
		return "", errors.Newf("authz: etcd user %q: not a name a password file can take (letters, digits, '.', '_', '@', '-')", user)
	}
	return filepath.Join(string(d), user+".password"), nil
}

// Password implements EtcdPasswords.
func (d PasswordDir) Password(user string) (string, bool, error) {
	path, err := d.File(user)
	if err != nil {
		return "", false, err
	}
	if b, err := os.ReadFile(path); err == nil {
		if pw := strings.TrimRight(string(b), "\r\n"); pw != "" {
			return pw, false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, errors.Wrapf(err, "authz: etcd password of %s", user)
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return "", false, errors.Wrap(err, "authz: etcd passwords")
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", false, errors.Wrap(err, "authz: etcd password")
	}
	pw := base64.RawURLEncoding.EncodeToString(raw[:])
	// Written beside and renamed: a crash leaves the old file or the new
	// one, never half a password that etcd was told in full.
	tmp, err := os.CreateTemp(string(d), ".tmp-"+user+"-*")
	if err != nil {
		return "", false, errors.Wrap(err, "authz: etcd password")
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.WriteString(pw + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", false, errors.Wrapf(err, "authz: etcd password of %s", user)
	}
	return pw, true, nil
}

// EtcdAuthReport says what SyncEtcdAuth changed.
type EtcdAuthReport struct {
	Created, Updated, Deleted []string // users
	Enabled                   bool     // authentication turned on just now
}

// SyncEtcdAuth makes etcd's authentication what the cluster under root
// and users (EtcdUsers) imply, and turns it on: the roles of EtcdRoles;
// the user root (role root) and EtcdNodeUser (EtcdRoleNode) with their
// passwords; each of users with its password and its role, and no other
// streamwal role; no user that holds streamwal-admin or streamwal-reader
// but is neither of those (a principal gone from the policy; a user that
// also holds streamwal-node or root is left alone). Root exists before
// authentication is turned on, as etcd demands. cli must be root's client
// (its credentials are ignored while authentication is off). It is
// idempotent, and a failure half way is mended by the next call.
//
// Users are bound by name and password only: the embedded member walnode
// runs does not take a client certificate's CN as a user (see package
// doc, "Administrative actions").
func SyncEtcdAuth(ctx context.Context, cli *clientv3.Client, root string, users map[string]string, pw EtcdPasswords) (EtcdAuthReport, error) {
	var rep EtcdAuthReport
	roles, err := SetupEtcdRoles(ctx, cli, root)
	if err != nil {
		return rep, err
	}
	ours := map[string]bool{"root": true}
	for _, r := range roles {
		ours[r.Name] = true
	}
	want := map[string]string{EtcdRootUser: "root", EtcdNodeUser: EtcdRoleNode}
	for u, r := range users {
		if reservedPrincipal(u) {
			return rep, errors.Newf("authz: etcd user %q is reserved", u)
		}
		if !ours[r] || r == "root" {
			return rep, errors.Newf("authz: etcd user %q: role %q is none of streamwal's", u, r)
		}
		want[u] = r
	}
	if _, err := cli.RoleAdd(ctx, "root"); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return rep, errors.Wrap(err, "authz: etcd role root")
	}
	// Root first: etcd refuses to turn authentication on without it.
	names := make([]string, 0, len(want))
	for u := range want {
		if u != EtcdRootUser {
			names = append(names, u)
		}
	}
	slices.Sort(names)
	names = append([]string{EtcdRootUser}, names...)
	for _, u := range names {
		password, isNew, err := pw.Password(u)
		if err != nil {
			return rep, err
		}
		info, err := cli.UserGet(ctx, u)
		switch {
		case errors.Is(err, rpctypes.ErrUserNotFound):
			if _, err := cli.UserAdd(ctx, u, password); err != nil {
				return rep, errors.Wrapf(err, "authz: etcd user %s", u)
			}
			rep.Created = append(rep.Created, u)
			info = &clientv3.AuthUserGetResponse{}
		case err != nil:
			return rep, errors.Wrapf(err, "authz: etcd user %s", u)
		case isNew:
			// The password file was lost (or never written): the user
			// gets the one just made, which its file now holds.
			if _, err := cli.UserChangePassword(ctx, u, password); err != nil {
				return rep, errors.Wrapf(err, "authz: etcd user %s", u)
			}
			rep.Updated = append(rep.Updated, u)
		}
		changed := false
		for _, r := range info.Roles {
			if r != want[u] && ours[r] {
				if _, err := cli.UserRevokeRole(ctx, u, r); err != nil {
					return rep, errors.Wrapf(err, "authz: etcd user %s: revoke %s", u, r)
				}
				changed = true
			}
		}
		if !slices.Contains(info.Roles, want[u]) {
			if _, err := cli.UserGrantRole(ctx, u, want[u]); err != nil {
				return rep, errors.Wrapf(err, "authz: etcd user %s: grant %s", u, want[u])
			}
			changed = true
		}
		if changed && !slices.Contains(rep.Created, u) && !slices.Contains(rep.Updated, u) {
			rep.Updated = append(rep.Updated, u)
		}
	}
	list, err := cli.UserList(ctx)
	if err != nil {
		return rep, errors.Wrap(err, "authz: etcd users")
	}
	for _, u := range list.Users {
		if _, ok := want[u]; ok {
			continue
		}
		info, err := cli.UserGet(ctx, u)
		if err != nil {
			return rep, errors.Wrapf(err, "authz: etcd user %s", u)
		}
		// Only the users of the principals' roles are the policy's to
		// remove: others are someone else's, and a user of the node role
		// may be a node's of an earlier setup (deleting it would stop
		// those nodes).
		principalRole := func(r string) bool { return r == EtcdRoleAdmin || r == EtcdRoleReader }
		if slices.ContainsFunc(info.Roles, principalRole) && !slices.Contains(info.Roles, EtcdRoleNode) && !slices.Contains(info.Roles, "root") {
			if _, err := cli.UserDelete(ctx, u); err != nil {
				return rep, errors.Wrapf(err, "authz: etcd user %s", u)
			}
			rep.Deleted = append(rep.Deleted, u)
		}
	}
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return rep, errors.Wrap(err, "authz: etcd auth status")
	}
	if !st.Enabled {
		if _, err := cli.AuthEnable(ctx); err != nil {
			return rep, errors.Wrap(err, "authz: etcd auth enable")
		}
		rep.Enabled = true
	}
	return rep, nil
}

// ErrEtcdUnguarded is an etcd whose authentication is off beside a node
// that enforces a policy: anyone who reaches etcd could write the
// cluster's keys, whatever the policy says.
var ErrEtcdUnguarded = errors.New("etcd's authentication is off")

// CheckEtcdGuarded returns an error matching ErrEtcdUnguarded when the
// etcd of cli has authentication off.
func CheckEtcdGuarded(ctx context.Context, cli *clientv3.Client) error {
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return errors.Wrap(err, "authz: etcd auth status")
	}
	if !st.Enabled {
		return ErrEtcdUnguarded
	}
	return nil
}
