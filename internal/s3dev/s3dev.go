// Package s3dev runs an S3-compatible store inside the calling process, for
// trying the s3 backend on one machine: walnode -dev-s3 and walbench
// -backend s3 without an endpoint. It is gofakes3 on its in-memory backend
// (which applies conditional PUTs atomically, so the backend's open-time
// probe accepts it), over plain HTTP, with one bucket. Its data lives in
// the process and goes with it: for trying only.
//
// It does not check request signatures: any credentials are accepted. The
// s3 backend still signs, so a client needs some: Config sets the static
// pair below, and WriteCredentials writes it as a shared-credentials file
// for a configuration file to name (credentialsFile).
//
// Tests use package internal/s3test, which starts the same store (and
// others) for a testing.TB; this package does not import testing.
package s3dev

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/cockroachdb/errors"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// The credentials Config and WriteCredentials give: the store accepts
// any, these say what they are.
const (
	AccessKey = "streamwal-dev"
	SecretKey = "streamwal-dev-not-a-secret"
)

// DefaultBucket is the bucket Start creates when it is given none.
const DefaultBucket = "streamwal"

// Store is a running store. Its goroutine (the HTTP server's) is stopped
// and waited for by Close.
type Store struct {
	// Endpoint is the store's URL ("http://127.0.0.1:9000"); Bucket exists
	// on it.
	Endpoint string
	Bucket   string

	srv  *http.Server
	done chan struct{}
}

// Start serves a store on addr (host:port; port 0 picks a free one) with
// the bucket created (DefaultBucket when empty).
func Start(addr, bucket string) (*Store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		return nil, errors.Wrapf(err, "s3dev: create bucket %q", bucket)
	}
	// No time-skew check: a request is never refused for its clock.
	faker := gofakes3.New(backend, gofakes3.WithTimeSkewLimit(0), gofakes3.WithLogger(gofakes3.DiscardLog()))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.Wrapf(err, "s3dev: listen on %s", addr)
	}
	s := &Store{Endpoint: "http://" + ln.Addr().String(), Bucket: bucket,
		srv:  &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln) // ErrServerClosed once Close is called
	}()
	return s, nil
}

// Close stops the store, closing its connections, and waits for its
// server to end. Everything it held is gone.
func (s *Store) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}

// Config is an s3 backend configuration for the store: keys under prefix
// ("" for s3.DefaultPrefix), path-style addressing, the static credentials.
func (s *Store) Config(prefix string) s3.Config {
	return s3.Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: prefix, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, "")}
}

// WriteCredentials writes the static credentials to path as a
// shared-credentials file (profile default), readable by its owner only.
func WriteCredentials(path string) error {
	text := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", AccessKey, SecretKey)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return errors.Wrap(err, "s3dev: write credentials")
	}
	return nil
}
