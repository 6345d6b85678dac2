// Package etcdtest runs real etcd servers in the test process
// (go.etcd.io/etcd/server/v3/embed), for the tests of everything that
// talks to etcd: meta/etcdstore, the pool, the coordinator.
//
// A Server is one single-member cluster on loopback TCP ports the kernel
// picks, with its data in a fresh temporary directory, fast raft timings
// (TickMs 10, ElectionMs 100: it starts in about 100 ms and leases can be
// as short as 1 s), fsync off (tests need no durability against power
// loss), the cheapest password hashing (for tests that turn etcd's
// authentication on) and its logs off. It is not for production.
//
// The intended shape is one server per test package, started in TestMain,
// and a unique key prefix per test:
//
//	var srv *etcdtest.Server
//
//	func TestMain(m *testing.M) {
//		var err error
//		if srv, err = etcdtest.New(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		goleak.VerifyTestMain(etcdtest.Main(m, srv))
//	}
//
//	func TestX(t *testing.T) {
//		cli := etcdtest.Client(t, srv.Endpoints())
//		prefix := etcdtest.Prefix(t)
//		...
//	}
//
// Tests that stop a server (to see a client fail) start their own with
// Start. Teardown order matters: clients (and their sessions and watches)
// before the server, or the server's Close waits out the request timeout
// for their streams; Client and Start register their cleanups so that
// t.Cleanup's last-in-first-out order does that.
package etcdtest

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/atomic"
	"go.uber.org/zap"
)

// StartTimeout bounds how long New waits for the server to be ready.
const StartTimeout = 30 * time.Second

// Server is a single-member etcd cluster running in this process.
type Server struct {
	etcd      *embed.Etcd
	dir       string
	endpoints []string
	closeOnce sync.Once
}

// Options are what a server of NewWith differs in from New's.
type Options struct {
	// TLS, when set, makes the server serve its clients over TLS (https
	// endpoints) with these PEM files; with ClientCAFile it requires
	// client certificates of those CAs.
	TLS *TLSFiles
}

// TLSFiles are a server's certificate, key and client CA files.
type TLSFiles struct {
	CertFile, KeyFile, ClientCAFile string
}

// New starts a server in a new temporary directory. Close stops it and
// removes the directory.
func New() (*Server, error) { return NewWith(Options{}) }

// NewWith starts a server with opts; see New.
func NewWith(opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, errors.Wrap(err, "etcdtest: temp dir")
	}
	s, err := start(dir, opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Start starts a server that is stopped when tb ends (after the cleanups
// registered later, such as Client's).
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// StartWith is Start with opts.
func StartWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := NewWith(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func start(dir string, opts Options) (*Server, error) {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.BcryptCost = 4 // bcrypt's least: tests that turn authentication on dial with passwords often
	cfg.Logger, cfg.LogLevel = "zap", "panic"
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	clientURL, scheme := loopback, "http://"
	if opts.TLS != nil {
		clientURL.Scheme, scheme = "https", "https://"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: opts.TLS.CertFile, KeyFile: opts.TLS.KeyFile,
			TrustedCAFile: opts.TLS.ClientCAFile, ClientCertAuth: opts.TLS.ClientCAFile != ""}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{loopback}, []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, errors.Wrap(err, "etcdtest: start etcd")
	}
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, errors.Wrap(err, "etcdtest: etcd failed while starting")
	case <-e.Server.StopNotify():
		e.Close()
		return nil, errors.New("etcdtest: etcd stopped while starting")
	case <-timer.C:
		e.Close()
		return nil, errors.Newf("etcdtest: etcd not ready after %s", StartTimeout)
	}
	s := &Server{etcd: e, dir: dir}
	for _, l := range e.Clients {
		s.endpoints = append(s.endpoints, scheme+l.Addr().String())
	}
	return s, nil
}

// Endpoints are the client URLs of the server.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Etcd is the embedded server, for what this package does not wrap.
func (s *Server) Etcd() *embed.Etcd { return s.etcd }

// Close stops the server and removes its directory; clients of it fail
// with Unavailable from then on. Close clients first (see the package
// doc). Safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.etcd.Close()
		_ = os.RemoveAll(s.dir)
	})
}

// Client connects a client to endpoints and closes it when tb ends. It
// does not wait for the connection: the first request does.
func Client(tb testing.TB, endpoints []string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcdtest: client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// prefixSeq makes prefixes unique within the process.
var prefixSeq atomic.Int64

// Prefix returns a key prefix no other call of Prefix in this process
// returns, nor a prefix of one: "/etcdtest/<n>/<test name>/". Use one per
// test on a shared server.
func Prefix(tb testing.TB) string {
	name := strings.NewReplacer(" ", "_").Replace(tb.Name())
	return fmt.Sprintf("/etcdtest/%d/%s/", prefixSeq.Add(1), name)
}

// Main wraps m so that srv is closed after the tests and before the leak
// check of goleak.VerifyTestMain(etcdtest.Main(m, srv)).
func Main(m *testing.M, srv *Server) interface{ Run() int } {
	return mainM{m: m, srv: srv}
}

type mainM struct {
	m   *testing.M
	srv *Server
}

func (m mainM) Run() int {
	defer m.srv.Close()
	return m.m.Run()
}
