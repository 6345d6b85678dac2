package s3

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

const testBucket = "streamwal-test"

// testStore is gofakes3 (s3mem, whose conditional PUTs are atomic) in the
// test's process, spoken to over cleartext HTTP/2: one connection carries
// every request, so that the suite's goroutine snapshots do not see an
// HTTP/1 pool grow. wrap, when set, sits in front of gofakes3 (a store
// that ignores conditions, say).
type testStore struct {
	endpoint string
	backend  *s3mem.Backend
	base     http.RoundTripper
	prefixes atomic.Int64
}

type storeOption func(*storeOpts)

type storeOpts struct {
	wrap func(http.Handler) http.Handler
}

func withHandler(wrap func(http.Handler) http.Handler) storeOption {
	return func(o *storeOpts) { o.wrap = wrap }
}

func newTestStore(tb testing.TB, opts ...storeOption) *testStore {
	tb.Helper()
	var so storeOpts
	for _, o := range opts {
		o(&so)
	}
	backend := s3mem.New()
	require.NoError(tb, backend.CreateBucket(testBucket))
	var h http.Handler = gofakes3.New(backend, gofakes3.WithTimeSkewLimit(0), gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	if so.wrap != nil {
		h = so.wrap(h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: &protos}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	var cp http.Protocols
	cp.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &cp, MaxIdleConnsPerHost: 1}
	tb.Cleanup(func() {
		_ = srv.Close()
		<-done
		tr.CloseIdleConnections()
	})
	return &testStore{endpoint: "http://" + ln.Addr().String(), backend: backend, base: tr}
}

// config is a configuration for a fresh prefix of the store, with the
// short intervals tests want; rt, when set, wraps the transport.
func (s *testStore) config(rt func(http.RoundTripper) http.RoundTripper) Config {
	var tr http.RoundTripper = s.base
	if rt != nil {
		tr = rt(tr)
	}
	return Config{
		Endpoint: s.endpoint, Bucket: testBucket, Prefix: fmt.Sprintf("t%d/", s.prefixes.Add(1)), Region: "us-east-1",
		PathStyle:     true,
		Credentials:   credentials.NewStaticCredentialsProvider("streamwal", "streamwal-secret", ""),
		HTTPClient:    &http.Client{Transport: tr},
		FlushInterval: 3 * time.Millisecond,
		PollInterval:  20 * time.Millisecond,
		MaxAttempts:   3,
		ProbeRacers:   4,
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("S3_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newOpener makes an Opener of cfg, closed with the test.
func newOpener(tb testing.TB, cfg Config, opts ...walimpls.Option) *Opener {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := New(ctx, cfg, append([]walimpls.Option{walimpls.WithLogger(testLogger())}, opts...)...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = o.Close() })
	return o
}

// counter counts the requests that pass it, by method.
type counter struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
	all  []string
}

func newCounter(next http.RoundTripper) *counter {
	return &counter{next: next, n: map[string]int{}}
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.Method]++
	c.all = append(c.all, r.Method+" "+r.URL.Path)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *counter) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

func (c *counter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = map[string]int{}
	c.all = nil
}

// holder holds the requests a predicate picks until they are released.
type holder struct {
	next  http.RoundTripper
	mu    sync.Mutex
	pick  func(*http.Request) bool
	held  chan *heldReq
	count atomic.Int64
}

type heldReq struct {
	r       *http.Request
	release chan struct{}
}

func newHolder(next http.RoundTripper) *holder {
	return &holder{next: next, held: make(chan *heldReq, 64)}
}

// hold makes the holder hold the requests pick selects (nil: none).
func (h *holder) hold(pick func(*http.Request) bool) {
	h.mu.Lock()
	h.pick = pick
	h.mu.Unlock()
}

func (h *holder) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	pick := h.pick
	h.mu.Unlock()
	if pick != nil && pick(r) {
		hr := &heldReq{r: r, release: make(chan struct{})}
		h.count.Add(1)
		h.held <- hr
		select {
		case <-hr.release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return h.next.RoundTrip(r)
}

// wait waits for the next held request.
func (h *holder) wait(t *testing.T) *heldReq {
	t.Helper()
	select {
	case hr := <-h.held:
		return hr
	case <-time.After(20 * time.Second):
		require.FailNow(t, "no request was held")
	}
	return nil
}

// putTo picks the PUTs of keys ending with suffix.
func putTo(suffix string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, suffix)
	}
}

// drain reads and closes a body.
func drain(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, rc)
	_ = rc.Close()
}
