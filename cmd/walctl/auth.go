package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/security/authz"
)

// credentials are the secrets a command line names by file.
type credentials struct {
	token, etcdPassword string
}

// credentials reads the files of -token-file and -etcd-password-file. An
// error names the flag and the file, never what is in it.
func (o options) credentials() (credentials, error) {
	var c credentials
	read := func(flagName, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", errors.Wrapf(err, "-%s", flagName)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", errors.Newf("-%s %s: the file is empty", flagName, path)
		}
		return v, nil
	}
	var err error
	if o.tokenFile != "" {
		if c.token, err = read("token-file", o.tokenFile); err != nil {
			return c, err
		}
	}
	switch {
	case o.etcdPasswordFile != "" && o.etcdUser == "":
		return c, errors.New("-etcd-password-file needs -etcd-user")
	case o.etcdUser != "" && o.etcdPasswordFile == "":
		return c, errors.New("-etcd-user needs -etcd-password-file (the password is never taken on the command line)")
	case o.etcdUser != "":
		if c.etcdPassword, err = read("etcd-password-file", o.etcdPasswordFile); err != nil {
			return c, err
		}
	}
	return c, nil
}

// tokenCreate runs "walctl token create".
func (c *ctl) tokenCreate(sub string) error {
	if sub != "create" {
		return errors.Newf("token: unknown subcommand %q (create)", sub)
	}
	token, hash, err := authz.NewToken(nil)
	if err != nil {
		return err
	}
	if c.json {
		return json.NewEncoder(c.out).Encode(map[string]string{"token": token, "hash": hash})
	}
	_, err = fmt.Fprintf(c.out, "%s\n%s\n", token, hash)
	if err == nil {
		_, _ = fmt.Fprintln(c.errOut, "walctl: the first line is the token: give it to its holder, it is not shown again;\n"+
			"the second goes under the principal's tokens in the -authz policy")
	}
	return err
}

// etcdRoles runs "walctl etcd-roles".
func (c *ctl) etcdRoles(ctx context.Context) error {
	roles, err := authz.SetupEtcdRoles(ctx, c.cli, c.layout.Root)
	if err != nil {
		return err
	}
	for _, r := range roles {
		for _, p := range r.Permissions {
			kind := map[clientv3.PermissionType]string{
				clientv3.PermissionType(clientv3.PermRead): "read", clientv3.PermissionType(clientv3.PermWrite): "write",
				clientv3.PermissionType(clientv3.PermReadWrite): "readwrite"}[p.Type]
			if c.json {
				if err := json.NewEncoder(c.out).Encode(map[string]string{"role": r.Name, "permission": kind, "prefix": p.Prefix}); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(c.out, "%-17s %-9s %s*\n", r.Name, kind, p.Prefix)
		}
	}
	if !c.json {
		fmt.Fprintf(c.errOut, `walctl: roles ready. Then, with etcdctl as root:
  etcdctl user add <node-user>   && etcdctl user grant-role <node-user> %s
  etcdctl user add <operator>    && etcdctl user grant-role <operator> %s
  etcdctl user add <viewer>      && etcdctl user grant-role <viewer> %s
  etcdctl auth enable            (needs the root user: etcdctl user add root)
`, authz.EtcdRoleNode, authz.EtcdRoleAdmin, authz.EtcdRoleReader)
	}
	return nil
}

// policy runs "walctl policy <file> [<principal> <action> <channel>]".
func (c *ctl) policy(args []string) error {
	pc, err := authz.Load(args[0])
	if err != nil {
		return err
	}
	p, err := authz.Compile(pc)
	if err != nil {
		return err
	}
	switch len(args) {
	case 1:
		tokens := 0
		for _, b := range pc.Principals {
			tokens += len(b.Tokens)
		}
		if c.json {
			return json.NewEncoder(c.out).Encode(map[string]int{"roles": len(pc.Roles), "principals": len(pc.Principals), "tokens": tokens})
		}
		_, err := fmt.Fprintf(c.out, "%s: %d roles, %d principals, %d token hashes\n", args[0], len(pc.Roles), len(pc.Principals), tokens)
		return err
	case 4:
	default:
		return errors.New("policy: give the file alone, or the file, a principal, an action and a channel")
	}
	principal, action, channel := args[1], authz.Action(args[2]), args[3]
	switch action {
	case authz.ActionAppend, authz.ActionRead, authz.ActionAdmin, authz.ActionCommit:
	default:
		return errors.Newf("policy: unknown action %q (append, read, admin or commit)", args[2])
	}
	if channel == "*" {
		channel = "" // every channel
	}
	pr := p.Principal(principal)
	allowed := pr.Allows(action, channel)
	if c.json {
		if err := json.NewEncoder(c.out).Encode(map[string]any{"principal": principal, "action": action, "channel": args[3], "allowed": allowed}); err != nil {
			return err
		}
	} else {
		verdict := "allowed"
		if !allowed {
			verdict = "denied"
		}
		if _, err := fmt.Fprintf(c.out, "%s: %s %s %s\n", verdict, principal, action, args[3]); err != nil {
			return err
		}
	}
	if !allowed {
		why := "no grant"
		if !pr.Known() {
			why = "the policy does not name the principal"
		}
		return errors.Newf("policy: %s may not %s %s: %s", principal, action, args[3], why)
	}
	return nil
}

// etcdAuth runs "walctl etcd-auth".
func (c *ctl) etcdAuth(ctx context.Context) error {
	pc, err := authz.Load(c.opts.authzFile)
	if err != nil {
		return err
	}
	pw := authz.PasswordDir(c.opts.passwordDir)
	rep, err := authz.SyncEtcdAuth(ctx, c.cli, c.layout.Root, pc.EtcdUsers(), pw)
	if err != nil {
		return err
	}
	if c.json {
		return json.NewEncoder(c.out).Encode(rep)
	}
	fmt.Fprintf(c.out, "created %v, updated %v, deleted %v; authentication on", rep.Created, rep.Updated, rep.Deleted)
	if rep.Enabled {
		fmt.Fprint(c.out, " (just now)")
	}
	_, err = fmt.Fprintf(c.out, "\npasswords in %s (<user>.password): root's administers etcd from now on\n", c.opts.passwordDir)
	return err
}
