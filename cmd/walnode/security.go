package main

import (
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// etcdPasswordEnv holds the etcd user's password when no
// -etcd-password-file is given: never a flag, whose value ps shows.
const etcdPasswordEnv = "STREAMWAL_ETCD_PASSWORD"

// check refuses flags that contradict each other, and plaintext on a
// network: a node that listens beyond loopback without TLS lets anyone who
// reaches its port append and read, so it needs -tls-cert or an explicit
// -insecure.
func (p params) check() error {
	switch p.crashAfter {
	case "", string(chainwal.StepFenced), string(chainwal.StepSealed), string(chainwal.StepOpened), string(chainwal.StepPruneDeleted),
		string(retention.StepFloor), string(retention.StepTruncated):
	default:
		return errors.Newf("-crash-after %q: not a step (fenced, sealed, opened, prune-deleted, floor-recorded, truncated)", p.crashAfter)
	}
	if p.insecure && p.tlsCert != "" {
		return errors.New("-insecure and -tls-cert contradict each other: give one")
	}
	if err := (tlsconf.Config{CertFile: p.tlsCert, KeyFile: p.tlsKey, Names: apiNames}).Validate(); err != nil {
		return err
	}
	if p.tlsClientCA != "" && p.tlsCert == "" {
		return errors.New("-tls-client-ca needs -tls-cert and -tls-key: mutual TLS is TLS")
	}
	if p.tlsClientCertOptional && (p.tlsClientCA == "" || p.authz == "") {
		// Without a policy a client without a certificate could do
		// anything: that is no mutual TLS.
		return errors.New("-tls-client-cert-optional needs -tls-client-ca and -authz: clients without a certificate are refused by the policy unless a token names them")
	}
	if p.tlsCert != "" && p.tlsClientCA == "" && p.etcd == "" && !loopback(p.etcdListen) {
		// TLS hides the traffic, but any client could still write the
		// cluster's keys: the embedded member knows its peers only by
		// their certificates.
		return errors.Newf("-etcd-listen %s is not a loopback address and the embedded etcd member would take any client: "+
			"give -tls-client-ca so that it requires certificates of that CA", p.etcdListen)
	}
	if p.etcdGuardedElsewhere && (p.etcd == "" || p.authz == "") {
		return errors.New("-etcd-guarded-elsewhere is for a node with -authz on an etcd of -etcd: the embedded member's authentication is always on with -authz")
	}
	if p.etcd == "" && (p.etcdUser != "" || p.etcdPasswordFile != "") {
		return errors.New("-etcd-user and -etcd-password-file are for an etcd of -etcd: the embedded member's users are walnode's (their passwords in <-data>/etcd-auth)")
	}
	if p.insecure || p.tlsCert != "" {
		return nil
	}
	for _, l := range []struct{ flag, addr string }{{"-listen", p.listen}, {"-etcd-listen", p.etcdListen}} {
		if l.flag == "-etcd-listen" && p.etcd != "" {
			continue // no embedded member
		}
		if !loopback(l.addr) {
			return errors.Newf("%s %s is not a loopback address and TLS is off: give -tls-cert and -tls-key "+
				"(walctl certs create-node makes them), or -insecure to serve plaintext anyway", l.flag, l.addr)
		}
	}
	return nil
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var apiNames = tlsconf.Names{CertFile: "-tls-cert", KeyFile: "-tls-key", CAFile: "-tls-ca", ClientCAFile: "-tls-client-ca"}

// tlsConfigs are a node's TLS configurations; nil ones are plaintext.
type tlsConfigs struct {
	server *tls.Config // the API
	peers  *tls.Config // the coordinator's liveness streams to the nodes
	etcd   *tls.Config // every etcd connection
	// serverFiles are the API's certificate and client CA, for metrics.
	serverFiles *tlsconf.Source
}

// register exposes the API certificate's expiry and whether replaced files
// failed to load (the node then serves the last good ones), so that an
// alert can fire before a certificate expires or when a rotation broke.
func (t tlsConfigs) register(reg prometheus.Registerer) error {
	if t.serverFiles == nil {
		return nil
	}
	src := t.serverFiles
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "streamwal", Subsystem: "tls", Name: "certificate_not_after_seconds",
			Help: "When the certificate the API serves expires (Unix time)."}, func() float64 {
			if c := src.Certificate(); c != nil {
				return float64(c.NotAfter.Unix())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "streamwal", Subsystem: "tls", Name: "reload_failing",
			Help: "1 while the API's replaced certificate, key or client CA files cannot be used (the last good ones are served)."}, func() float64 {
			if src.Err() != nil {
				return 1
			}
			return 0
		}),
	} {
		if err := reg.Register(c); err != nil {
			return errors.Wrap(err, "walnode: tls metrics")
		}
	}
	return nil
}

// tlsConfigs reads the files the flags name; an unusable file stops the
// node before it starts anything, naming the flag, the file and why.
//
// With TLS the liveness stream takes only a verified node's certificate
// (node.Config.TLS). Without -tls-client-ca the API still verifies a
// client certificate given, against -tls-ca (the CA that verifies the
// other nodes): clients without one connect as before, a certificate a
// client presents must chain to that CA, and the leading coordinator's
// stream holds with the node certificate it presents. With neither CA no
// certificate can be verified: the stream is refused to every caller and
// the node warns (node.Node.Start) rather than refuses to start. Nothing
// is open that way: a node's identity is a URI only a CA the operator
// runs issues, so without its file there is no node to admit, and
// failure detection falls back to the lease. Refusing to start would
// break the documented -tls-cert/-tls-key-alone node for no safety.
func (p params) tlsConfigs(logger *slog.Logger) (tlsConfigs, error) {
	var out tlsConfigs
	if p.tlsCert != "" {
		sc := tlsconf.Config{CertFile: p.tlsCert, KeyFile: p.tlsKey, ClientCAFile: p.tlsClientCA,
			ClientCertOptional: p.tlsClientCertOptional, Names: apiNames, Logger: logger}
		if sc.ClientCAFile == "" && p.tlsCA != "" {
			sc.ClientCAFile, sc.ClientCertOptional, sc.Names.ClientCAFile = p.tlsCA, true, "-tls-ca"
		}
		server, files, err := sc.Server()
		if err != nil {
			return out, errors.Wrap(err, "walnode")
		}
		ca, caName := p.tlsCA, "-tls-ca"
		if ca == "" {
			ca, caName = p.tlsClientCA, "-tls-client-ca"
		}
		names := apiNames
		names.CAFile = caName
		peers, _, err := tlsconf.Config{CAFile: ca, CertFile: p.tlsCert, KeyFile: p.tlsKey, Names: names, Logger: logger}.Client()
		if err != nil {
			return out, errors.Wrap(err, "walnode")
		}
		out.server, out.peers, out.serverFiles = server, peers, files
	}
	// etcd: TLS when its endpoints are https (or the embedded member
	// serves TLS), with the node's own files unless -etcd-* say otherwise.
	etcdTLS := p.tlsCert != "" && p.etcd == ""
	for _, ep := range splitList(p.etcd) {
		etcdTLS = etcdTLS || strings.HasPrefix(ep, "https://")
	}
	if !etcdTLS {
		if p.etcdCA != "" || p.etcdCert != "" {
			return out, errors.New("walnode: -etcd-ca and -etcd-cert need https:// -etcd endpoints")
		}
		return out, nil
	}
	c := tlsconf.Config{CAFile: p.etcdCA, CertFile: p.etcdCert, KeyFile: p.etcdKey, Logger: logger,
		Names: tlsconf.Names{CAFile: "-etcd-ca", CertFile: "-etcd-cert", KeyFile: "-etcd-key"}}
	if c.CAFile == "" {
		c.CAFile, c.Names.CAFile = p.tlsCA, "-tls-ca"
		if c.CAFile == "" {
			c.CAFile, c.Names.CAFile = p.tlsClientCA, "-tls-client-ca"
		}
	}
	if c.CertFile == "" && c.KeyFile == "" {
		c.CertFile, c.KeyFile, c.Names.CertFile, c.Names.KeyFile = p.tlsCert, p.tlsKey, "-tls-cert", "-tls-key"
	}
	etcd, _, err := c.Client()
	if err != nil {
		return out, errors.Wrap(err, "walnode: etcd")
	}
	out.etcd = etcd
	return out, nil
}

// etcdCredentials are the etcd user and password: the password from
// -etcd-password-file, else from $STREAMWAL_ETCD_PASSWORD.
func (p params) etcdCredentials() (user, password string, err error) {
	return readCredentials(p.etcdUser, p.etcdPasswordFile)
}

func readCredentials(user, passwordFile string) (string, string, error) {
	if user == "" {
		if passwordFile != "" {
			return "", "", errors.New("-etcd-password-file needs -etcd-user")
		}
		return "", "", nil
	}
	if passwordFile == "" {
		pw := os.Getenv(etcdPasswordEnv)
		if pw == "" {
			return "", "", errors.Newf("-etcd-user %s needs a password: -etcd-password-file or $%s", user, etcdPasswordEnv)
		}
		return user, pw, nil
	}
	b, err := os.ReadFile(passwordFile)
	if err != nil {
		return "", "", errors.Wrapf(err, "-etcd-password-file %s", passwordFile)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", "", errors.Newf("-etcd-password-file %s is empty", passwordFile)
	}
	return user, pw, nil
}

func schemeOf(tls bool) string {
	if tls {
		return "https://"
	}
	return "http://"
}
