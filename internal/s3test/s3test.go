// Package s3test starts S3-compatible stores for the tests of the s3
// backend and of the layers above it: gofakes3 (its in-memory backend,
// which applies conditional PUTs atomically) in the test's own process.
// Everything it starts is stopped by the test's cleanup.
package s3test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
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
}

// Fake starts gofakes3 with its in-memory backend on a loopback port of the
// test's process, plain HTTP, with one bucket.
func Fake(tb testing.TB) *Store {
	tb.Helper()
	backend := s3mem.New()
	const bucket = "streamwal-test"
	if err := backend.CreateBucket(bucket); err != nil {
		tb.Fatalf("s3test: create bucket: %v", err)
	}
	faker := gofakes3.New(backend, gofakes3.WithTimeSkewLimit(0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("s3test: listen: %v", err)
	}
	srv := &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return &Store{Name: "gofakes3", Endpoint: "http://" + ln.Addr().String(), Bucket: bucket,
		AccessKey: "streamwal", SecretKey: "streamwal-secret", Region: "us-east-1"}
}

// Config is a backend configuration for s, its keys under prefix (which
// ends with "/"), with static credentials and path-style addressing.
func (s *Store) Config(prefix string) s3.Config {
	return s3.Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: prefix, Region: s.Region, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")}
}
