package main

import (
	"crypto/tls"
	"flag"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// secOpts are the flags of TLS, for the nodes and etcd (the credentials'
// are in auth.go).
type secOpts struct {
	ca, cert, key             string
	tls                       bool
	etcdCA, etcdCert, etcdKey string
}

var securityFlags = []flagDef{
	{"ca", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.sec.ca, "ca", "", "PEM CA bundle that verifies the nodes (and https etcd): TLS on")
	}},
	{"cert", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.sec.cert, "cert", "", "PEM client certificate for nodes (and https etcd) that require one (walctl certs create-client)")
	}},
	{"key", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.sec.key, "key", "", "PEM private key of -cert")
	}},
	{"tls", true, func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.sec.tls, "tls", false, "reach the nodes over TLS even without -ca (the system's roots verify them)")
	}},
	{"etcd-ca", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.sec.etcdCA, "etcd-ca", "", "PEM CA bundle that verifies https etcd endpoints (default -ca)")
	}},
	{"etcd-cert", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.sec.etcdCert, "etcd-cert", "", "PEM client certificate for etcd (default -cert)")
	}},
	{"etcd-key", false, func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.sec.etcdKey, "etcd-key", "", "PEM private key of -etcd-cert")
	}},
}

// nodeTLS is the TLS configuration for the nodes' API, nil for plaintext.
func (o options) nodeTLS() (*tls.Config, error) {
	s := o.sec
	if s.ca == "" && s.cert == "" && s.key == "" && !s.tls {
		return nil, nil
	}
	cfg, _, err := tlsconf.Config{CAFile: s.ca, CertFile: s.cert, KeyFile: s.key,
		Names: tlsconf.Names{CAFile: "-ca", CertFile: "-cert", KeyFile: "-key"}}.Client()
	return cfg, err
}

// etcdConfig is how walctl dials etcd: TLS when an endpoint is https
// (with -etcd-ca/-etcd-cert, else -ca/-cert).
func (o options) etcdConfig() (etcdstore.Config, error) {
	s := o.sec
	cfg := etcdstore.Config{Endpoints: strings.Split(o.etcd, ",")}
	https := false
	for _, ep := range cfg.Endpoints {
		https = https || strings.HasPrefix(ep, "https://")
	}
	if https {
		c := tlsconf.Config{CAFile: s.etcdCA, CertFile: s.etcdCert, KeyFile: s.etcdKey,
			Names: tlsconf.Names{CAFile: "-etcd-ca", CertFile: "-etcd-cert", KeyFile: "-etcd-key"}}
		if c.CAFile == "" {
			c.CAFile, c.Names.CAFile = s.ca, "-ca"
		}
		if c.CertFile == "" && c.KeyFile == "" {
			c.CertFile, c.KeyFile, c.Names.CertFile, c.Names.KeyFile = s.cert, s.key, "-cert", "-key"
		}
		t, _, err := c.Client()
		if err != nil {
			return cfg, err
		}
		cfg.TLS = t
	} else if s.etcdCA != "" || s.etcdCert != "" {
		return cfg, errors.Newf("-etcd-ca and -etcd-cert need https:// -etcd endpoints, not %s", o.etcd)
	}
	return cfg, nil
}

// clientConfig is the client's configuration of this command line.
func (c *ctl) clientConfig() client.Config {
	return client.Config{Etcd: c.cli, Root: c.layout.Root, TLS: c.tls, Token: c.token}
}

// nodeClient is an API client of the node at addr, with a bound on each
// connection attempt, and the function that closes its connections.
func (c *ctl) nodeClient(addr string, timeout time.Duration) (streamwalv1connect.WALServiceClient, func()) {
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: timeout}).DialContext}
	scheme := "http://"
	if c.tls != nil {
		tr.TLSClientConfig, tr.ForceAttemptHTTP2, scheme = c.tls.Clone(), true, "https://"
	}
	var opts []connect.ClientOption
	if c.token != "" {
		opts = append(opts, connect.WithInterceptors(client.BearerInterceptor(c.token)))
	}
	return streamwalv1connect.NewWALServiceClient(&http.Client{Transport: tr}, scheme+addr, opts...), tr.CloseIdleConnections
}
