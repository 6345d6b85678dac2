package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/security/authz"
)

// etcd.go: the embedded etcd member, its certificate and its users.

// embedded is the etcd member walnode runs in its process.
type embedded struct {
	etcd *embed.Etcd
	// passwords are the member's users' passwords, in -data.
	passwords authz.PasswordDir
	// serving keeps the pair the member serves with; nil without TLS.
	serving *servingPair
}

// etcdAuthDir is where the embedded member's users' passwords are kept:
// <-data>/etcd-auth/<user>.password.
func etcdAuthDir(data string) authz.PasswordDir {
	return authz.PasswordDir(filepath.Join(data, "etcd-auth"))
}

// startEtcd runs a single etcd member with its data in <-data>/etcd; with
// -tls-cert it serves its clients over TLS with the node's certificate
// (the last good pair, see servingPair), and with -tls-client-ca (and no
// -tls-client-cert-optional) admits only clients with a certificate of
// that CA. It never takes a certificate's CN as an etcd user: with -authz
// its users are bound by password (SyncEtcdAuth), so that no certificate
// of the CA, whatever its name says (root, a node's), is an etcd user.
func startEtcd(p params, server *tls.Config, logger *slog.Logger) (*embedded, error) {
	cfg := embed.NewConfig()
	cfg.Name = p.id
	cfg.Dir = filepath.Join(p.data, "etcd")
	cfg.LogLevel = "fatal" // its shutdown logs harmless "server closed" errors; real failures come through e.Err()
	curl, err := url.Parse(schemeOf(p.tlsCert != "") + p.etcdListen)
	if err != nil {
		return nil, errors.Wrapf(err, "walnode: -etcd-listen %q", p.etcdListen)
	}
	e := &embedded{passwords: etcdAuthDir(p.data)}
	if p.tlsCert != "" {
		e.serving, err = newServingPair(filepath.Join(p.data, "etcd-tls", "serving.pem"), server, logger)
		if err != nil {
			return nil, err
		}
		// ClientCertAuth false: the CA still admits connections (a CA
		// file makes etcd require and verify client certificates), but
		// no CN becomes a user.
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: e.serving.path, KeyFile: e.serving.path}
		if p.tlsClientCA != "" && !p.tlsClientCertOptional {
			cfg.ClientTLSInfo.TrustedCAFile = p.tlsClientCA
		}
	}
	purl, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e.etcd, err = embed.StartEtcd(cfg)
	if err != nil {
		return nil, errors.Wrap(err, "walnode: embedded etcd")
	}
	select {
	case <-e.etcd.Server.ReadyNotify():
		return e, nil
	case err := <-e.etcd.Err():
		e.etcd.Close()
		return nil, errors.Wrap(err, "walnode: embedded etcd")
	case <-time.After(60 * time.Second):
		e.etcd.Close()
		return nil, errors.New("walnode: embedded etcd did not start in 60s")
	}
}

// nodeCredentials are the user and password the node reaches its
// embedded member as: EtcdNodeUser, once its password exists (made by
// SyncEtcdAuth with -authz; a member whose authentication was turned on
// by an earlier run keeps needing it without -authz).
func (e *embedded) nodeCredentials(withAuthz bool) (string, string, error) {
	f, err := e.passwords.File(authz.EtcdNodeUser)
	if err != nil {
		return "", "", err
	}
	if !withAuthz {
		if _, err := os.Stat(f); err != nil {
			return "", "", nil
		}
	}
	pw, _, err := e.passwords.Password(authz.EtcdNodeUser)
	return authz.EtcdNodeUser, pw, err
}

// syncAuth makes the member's users and roles what policy implies and
// turns authentication on (authz.SyncEtcdAuth), as root.
func (e *embedded) syncAuth(ctx context.Context, endpoint string, etcdTLS *tls.Config, root string, pc authz.Config, logger *slog.Logger) error {
	pw, _, err := e.passwords.Password(authz.EtcdRootUser)
	if err != nil {
		return err
	}
	cli, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: []string{endpoint}, TLS: etcdTLS, Username: authz.EtcdRootUser, Password: pw})
	if err != nil {
		return errors.Wrap(err, "walnode: embedded etcd as root")
	}
	defer func() { _ = cli.Close() }()
	rep, err := authz.SyncEtcdAuth(ctx, cli, root, pc.EtcdUsers(), e.passwords)
	if err != nil {
		return errors.Wrap(err, "walnode: embedded etcd's users")
	}
	if rep.Enabled {
		logger.Info("embedded etcd: authentication on", "passwords", string(e.passwords))
	}
	if len(rep.Created)+len(rep.Updated)+len(rep.Deleted) > 0 {
		logger.Info("embedded etcd: users in step with the policy", "created", rep.Created, "updated", rep.Updated, "deleted", rep.Deleted,
			"passwords", string(e.passwords))
	}
	return nil
}

// Close stops the member.
func (e *embedded) Close() { e.etcd.Close() }

// checkExternalEtcd refuses an etcd without authentication beside a node
// with -authz, unless -etcd-guarded-elsewhere says it is guarded otherwise.
func checkExternalEtcd(ctx context.Context, cli *clientv3.Client, p params, logger *slog.Logger) error {
	err := authz.CheckEtcdGuarded(ctx, cli)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, authz.ErrEtcdUnguarded):
		return errors.Wrap(err, "walnode")
	case p.etcdGuardedElsewhere:
		logger.Warn("-etcd-guarded-elsewhere: etcd's authentication is off; whoever reaches etcd can write the cluster's keys, whatever -authz says",
			"etcd", p.etcd)
		return nil
	}
	return errors.Newf("-authz with etcd %s, whose authentication is off: anyone who reaches it writes the cluster's keys, whatever the policy says; "+
		"turn it on with: walctl -etcd %s etcd-auth -authz %s -passwords <dir> (TLS flags as for any walctl command), "+
		"then start this node with -etcd-user %s -etcd-password-file <dir>/%s.password; or give -etcd-guarded-elsewhere if etcd is guarded another way",
		p.etcd, p.etcd, p.authz, authz.EtcdNodeUser, authz.EtcdNodeUser)
}

// servingPair keeps the certificate and key the embedded member serves
// with in one file of its own, rewritten only with a pair that is good.
// etcd reads its files again on every handshake and has no callback to
// ask for a certificate: pointed at -tls-cert and -tls-key, a new
// certificate written over the old key (a rotation half done) would fail
// every handshake. The file holds the pair the API serves (its last good
// one), written by a rename, both in one file so that no handshake reads a
// certificate of one pair and the key of another.
type servingPair struct {
	path   string
	server *tls.Config // the API's: GetCertificate gives its last good pair
	log    *slog.Logger

	mu      sync.Mutex
	written *tls.Certificate
}

func newServingPair(path string, server *tls.Config, logger *slog.Logger) (*servingPair, error) {
	s := &servingPair{path: path, server: server, log: logger}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, errors.Wrap(err, "walnode: embedded etcd's certificate")
	}
	if err := s.refresh(); err != nil {
		return nil, err
	}
	return s, nil
}

// refresh writes the API's current pair if it is not the one written.
func (s *servingPair) refresh() error {
	cur, err := s.server.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		return errors.Wrap(err, "walnode: embedded etcd's certificate")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur == s.written {
		return nil
	}
	var b bytes.Buffer
	for _, der := range cur.Certificate {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	key, err := x509.MarshalPKCS8PrivateKey(cur.PrivateKey)
	if err != nil {
		return errors.Wrap(err, "walnode: embedded etcd's key")
	}
	_ = pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: key})
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".tmp-serving-*")
	if err != nil {
		return errors.Wrap(err, "walnode: embedded etcd's certificate")
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.Write(b.Bytes())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		return errors.Wrap(err, "walnode: embedded etcd's certificate")
	}
	if s.written != nil {
		s.log.Info("embedded etcd: serving the new certificate", "not_after", cur.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	s.written = cur
	return nil
}

// endpoint is the URL the node reaches its embedded member at.
func (e *embedded) endpoint(p params) string { return schemeOf(p.tlsCert != "") + p.etcdListen }

// pinnedClient is the node's TLS configuration for its own embedded
// member when no CA flag says what verifies it (-tls-cert and -tls-key
// alone): the member must present exactly the pair it was given, which
// the node wrote itself. base's client certificate is kept.
func (s *servingPair) pinnedClient(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	// The chain is checked below, against the one certificate that may
	// be presented; no CA would say more.
	cfg.InsecureSkipVerify = true
	cfg.RootCAs = nil
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(raw) > 0 && s.written != nil && bytes.Equal(raw[0], s.written.Certificate[0]) {
			return nil
		}
		return errors.New("walnode: the embedded etcd member presents a certificate this node did not give it")
	}
	return cfg
}
