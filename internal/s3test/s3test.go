// Package s3test starts S3-compatible stores for the tests of the s3
// backend and of the layers above it, and puts faults between a client
// and a store:
//
//   - Fake: gofakes3 (its in-memory backend, which applies conditional
//     PUTs atomically) in the test's own process.
//   - Versity: versitygw, a real S3 server, in its own process on a
//     temporary directory (see versity.go for where its binary comes
//     from).
//   - Stores: both, the list every backend test runs against.
//   - NewProxy: a proxy in front of a Store that holds, delays, drops,
//     answers or breaks chosen requests, and counts them.
//   - FakeIgnoringConditions and FakeNonAtomic: gofakes3 made into stores
//     that do not fence, for the tests of the backend's probe.
//
// Everything it starts (goroutines, servers, processes) is stopped, and
// waited for, by the test's cleanup.
package s3test

import (
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// Store is a running S3-compatible store with one bucket.
type Store struct {
	// Name says what the store is ("gofakes3", ...), for test names.
	Name string
	// Endpoint is its URL; Bucket exists on it.
	Endpoint string
	Bucket   string
	// AccessKey and SecretKey are credentials it accepts.
	AccessKey, SecretKey string
	// Region is the region to sign for.
	Region string
	// CAFile verifies the store's TLS certificate (FakeTLS); empty for
	// plain HTTP.
	CAFile string
	// HTTPClient, when set (FakeH2C), is the client Config gives the
	// backend.
	HTTPClient *http.Client
}

// Fake starts gofakes3 with its in-memory backend on a loopback port of the
// test's process, plain HTTP, with one bucket.
func Fake(tb testing.TB) *Store {
	tb.Helper()
	return fake(tb, "gofakes3", nil)
}

// fake starts gofakes3 like Fake, its handler wrapped by wrap (nil: as it
// is), under name.
func fake(tb testing.TB, name string, wrap func(http.Handler) http.Handler) *Store {
	tb.Helper()
	backend := s3mem.New()
	const bucket = "streamwal-test"
	if err := backend.CreateBucket(bucket); err != nil {
		tb.Fatalf("s3test: create bucket: %v", err)
	}
	faker := gofakes3.New(backend, gofakes3.WithTimeSkewLimit(0))
	h := faker.Server()
	if wrap != nil {
		h = wrap(h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("s3test: listen: %v", err)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true) // FakeH2C's client
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: &protos}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return &Store{Name: name, Endpoint: "http://" + ln.Addr().String(), Bucket: bucket,
		AccessKey: "streamwal", SecretKey: "streamwal-secret", Region: "us-east-1"}
}

// Stores starts every store the backend's tests run against, for a test
// to loop over: gofakes3 in the test's process and versitygw in its own.
func Stores(tb testing.TB) []*Store {
	tb.Helper()
	return []*Store{Fake(tb), Versity(tb)}
}

// Config is a backend configuration for s, its keys under prefix (which
// ends with "/"), with static credentials and path-style addressing.
func (s *Store) Config(prefix string) s3.Config {
	return s3.Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: prefix, Region: s.Region, PathStyle: true,
		Credentials: s.credentials(), CAFile: s.CAFile, HTTPClient: s.HTTPClient}
}

func (s *Store) credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")
}

// Client is an aws-sdk-go-v2 client of s (path-style, its credentials,
// the SDK's retries), for a test to look at or arrange the bucket with;
// opts adjust it (o.RetryMaxAttempts = 1 to see every failure). Its idle
// connections are closed by tb's cleanup.
func (s *Store) Client(tb testing.TB, opts ...func(*awss3.Options)) *awss3.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tb.Cleanup(tr.CloseIdleConnections)
	o := append([]func(*awss3.Options){func(o *awss3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint)
		o.Region = s.Region
		o.UsePathStyle = true
		o.Credentials = s.credentials()
		o.HTTPClient = &http.Client{Transport: tr}
	}}, opts...)
	return awss3.New(awss3.Options{}, o...)
}

// FakeTLS starts gofakes3 like Fake, served over TLS with a certificate of
// its own; the returned Store's CAFile is the PEM file that verifies it
// (Config sets it), so that a client without it refuses the store.
func FakeTLS(tb testing.TB) *Store {
	tb.Helper()
	backend := s3mem.New()
	const bucket = "streamwal-test"
	if err := backend.CreateBucket(bucket); err != nil {
		tb.Fatalf("s3test: create bucket: %v", err)
	}
	srv := httptest.NewUnstartedServer(gofakes3.New(backend, gofakes3.WithTimeSkewLimit(0)).Server())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes tests make on purpose
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	ca := filepath.Join(tb.TempDir(), "store-ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		tb.Fatalf("s3test: write the store's CA: %v", err)
	}
	return &Store{Name: "gofakes3-tls", Endpoint: srv.URL, Bucket: bucket,
		AccessKey: "streamwal", SecretKey: "streamwal-secret", Region: "us-east-1", CAFile: ca}
}

// FakeH2C starts gofakes3 like Fake, with a Config whose client speaks
// HTTP/2 in clear text over one connection: a test that counts goroutines
// (the conformance suite's scanner checks) sees no pool of HTTP/1
// connections grow and linger, on the client's side and on the store's in
// the same process. The connection is closed by tb's cleanup.
func FakeH2C(tb testing.TB) *Store {
	tb.Helper()
	s := fake(tb, "gofakes3-h2c", nil)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos, MaxIdleConnsPerHost: 1}
	tb.Cleanup(tr.CloseIdleConnections)
	s.HTTPClient = &http.Client{Transport: tr}
	return s
}
