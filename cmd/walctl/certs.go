package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/security/certs"
)

// certs.go: walctl certs, which makes a cluster's certificates in a
// directory without reaching any cluster.

// certOpts are the flags of walctl certs.
type certOpts struct {
	dir       string
	hosts     []string
	overwrite bool
	keyType   string
	validity  time.Duration
}

var certsFlags = map[string]flagDef{
	"dir": {"dir", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.certs.dir, "dir", "certs", "the directory of the certificates (ca.crt and ca.key are read from it)")
	}},
	"host": {"host", false, func(fs *flag.FlagSet, o *options) {
		fs.Func("host", "a DNS name or IP the node is reached at (repeat it, or comma-separate)", func(s string) error {
			for _, h := range strings.Split(s, ",") {
				if h = strings.TrimSpace(h); h != "" {
					o.certs.hosts = append(o.certs.hosts, h)
				}
			}
			return nil
		})
	}},
	"overwrite": {"overwrite", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.certs.overwrite, "overwrite", false, "replace existing files (by rename: nodes pick the new ones up on new connections)")
	}},
	"key-type": {"key-type", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.certs.keyType, "key-type", string(certs.ECDSAP256), "ecdsa-p256 or ed25519")
	}},
	"validity": {"validity", false, func(fs *flag.FlagSet, o *options) {
		fs.DurationVar(&o.certs.validity, "validity", 0, "how long the certificate is valid (default: 43800h for a CA, 8760h otherwise)")
	}},
}

var certsCommand = &command{name: "certs", args: "create-ca|create-node|create-client [<name>]",
	minArgs: 1, maxArgs: 2, offline: true, flags: []string{"dir", "host", "overwrite", "key-type", "validity"},
	summary: "make a CA, node and client certificates (PEM files, keys 0600)",
	detail: `Writes into -dir, never over an existing file unless -overwrite:
  create-ca                      ca.crt, ca.key (keep ca.key off the nodes)
  create-node <name> -host ...   node.<name>.crt/.key: serves the API and the embedded
                                 etcd, and dials other nodes; -host names every DNS name
                                 and IP clients use to reach it (127.0.0.1 too, for the
                                 node's own embedded etcd)
  create-client <principal>      client.<principal>.crt/.key: the principal is the
                                 certificate's common name; root, streamwal-*, n<digits>
                                 and the names of the nodes in -dir are refused
Each certificate says what it is for, not only whom it names: a node's
carries the URI streamwal://node/<name> and server and client use, a
client's streamwal://client/<principal> and client use only. Nodes tell
them apart by that, never by the name.
Keys are ECDSA P-256 (or -key-type ed25519). Needs no cluster.`,
	run: func(_ context.Context, c *ctl, args []string) error { return c.certs(args) }}

// certName is what a node name or principal may be: it becomes a file name.
var certName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

func (c *ctl) certs(args []string) error {
	o := c.opts.certs
	kt := certs.KeyType(o.keyType)
	if o.validity < 0 {
		return errors.Newf("-validity %s: must be positive", o.validity)
	}
	switch args[0] {
	case "create-ca":
		if len(args) != 1 {
			return errors.New("create-ca takes no name")
		}
		ca, err := certs.NewCA(certs.Request{CommonName: "streamwal CA", KeyType: kt, Validity: o.validity})
		if err != nil {
			return err
		}
		if err := certs.Write(o.dir, certs.CACert, certs.CAKey, ca.Pair, o.overwrite); err != nil {
			return err
		}
		return c.wrote(o.dir, certs.CACert, certs.CAKey, ca.Cert.NotAfter)
	case "create-node", "create-client":
		if len(args) != 2 {
			return errors.Newf("%s needs a name", args[0])
		}
		name := args[1]
		if !certName.MatchString(name) {
			return errors.Newf("%q is no valid name: letters, digits, '.', '_', '@' and '-', starting with a letter or digit", name)
		}
		if err := checkCertName(o.dir, args[0], name); err != nil {
			return err
		}
		ca, err := certs.LoadCA(filepath.Join(o.dir, certs.CACert), filepath.Join(o.dir, certs.CAKey))
		if err != nil {
			return errors.Wrap(err, "walctl certs create-ca makes one")
		}
		req := certs.Request{CommonName: name, KeyType: kt, Validity: o.validity, Kind: certs.Client}
		certFile, keyFile := certs.ClientFiles(name)
		if args[0] == "create-node" {
			if len(o.hosts) == 0 {
				return errors.New("create-node needs -host: every DNS name and IP the node is reached at")
			}
			req.Kind = certs.Node
			certFile, keyFile = certs.NodeFiles(name)
			for _, h := range o.hosts {
				if ip := net.ParseIP(h); ip != nil {
					req.IPs = append(req.IPs, ip)
				} else {
					req.DNSNames = append(req.DNSNames, h)
				}
			}
		} else if len(o.hosts) > 0 {
			return errors.New("-host is for create-node")
		}
		pair, err := ca.Issue(req)
		if err != nil {
			return err
		}
		if err := certs.Write(o.dir, certFile, keyFile, pair, o.overwrite); err != nil {
			return err
		}
		leaf, err := certs.Parse(pair.CertPEM)
		if err != nil {
			return err
		}
		return c.wrote(o.dir, certFile, keyFile, leaf.NotAfter)
	}
	return errors.Newf("unknown certs command %q: create-ca, create-node or create-client", args[0])
}

func (c *ctl) wrote(dir, certFile, keyFile string, notAfter time.Time) error {
	_, err := fmt.Fprintf(c.out, "wrote %s and %s (valid until %s)\n",
		filepath.Join(dir, certFile), filepath.Join(dir, keyFile), notAfter.UTC().Format(time.DateOnly))
	return err
}

// checkCertName refuses a name that would collide with another identity:
// a client named like a node of dir (or as nodes are named, or as etcd's
// root and node users), a node named like a client of dir.
func checkCertName(dir, cmd, name string) error {
	exists := func(file string) bool {
		_, err := os.Lstat(filepath.Join(dir, file))
		return err == nil
	}
	if cmd == "create-node" {
		if name == "root" || strings.HasPrefix(name, "streamwal-") {
			return errors.Newf("create-node %s: a reserved name: %s", name, certs.ReservedClientName(name, nil))
		}
		if crt, _ := certs.ClientFiles(name); exists(crt) {
			return errors.Newf("create-node %s: %s holds a client of that name: give the node another", name, filepath.Join(dir, crt))
		}
		return nil
	}
	var nodes []string
	if matches, err := filepath.Glob(filepath.Join(dir, "node.*.crt")); err == nil {
		for _, m := range matches {
			nodes = append(nodes, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "node."), ".crt"))
		}
	}
	if why := certs.ReservedClientName(name, nodes); why != "" {
		return errors.Newf("create-client %s: a reserved name: %s", name, why)
	}
	return nil
}
