package s3

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

func newErr(t *testing.T, cfg Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := New(ctx, cfg, walimpls.WithLogger(testLogger()))
	if err == nil {
		_ = o.Close()
	}
	require.Error(t, err)
	return err
}

// ignoreConditions is a store that ignores If-None-Match and If-Match.
func ignoreConditions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("If-None-Match")
		r.Header.Del("If-Match")
		next.ServeHTTP(w, r)
	})
}

func TestProbeRefusesAStoreIgnoringConditions(t *testing.T) {
	st := newTestStore(t, withHandler(ignoreConditions))
	err := newErr(t, st.config(nil))
	require.ErrorIs(t, err, ErrNoConditionalWrites)
	require.Contains(t, err.Error(), st.endpoint)
	require.Contains(t, err.Error(), "4 of 4 concurrent create-only PUTs")
	require.NotContains(t, err.Error(), "\n")
	// Printed as callers print errors, with and without detail.
	require.Equal(t, err.Error(), fmt.Sprintf("%v", err))
	require.Contains(t, fmt.Sprintf("%+v", err), "4 of 4 concurrent create-only PUTs")

	// Unfenced, the same store is taken, and the backend says it cannot
	// fence.
	cfg := st.config(nil)
	cfg.Unfenced = true
	o := newOpener(t, cfg)
	require.False(t, o.Capabilities().Fencing)
}

// nonAtomic checks create-only conditions itself, then lets the racers
// through together: each saw the key absent, all of them write.
func nonAtomic(st **testStore, racers int) func(http.Handler) http.Handler {
	var (
		mu      sync.Mutex
		arrived int
		gate    = make(chan struct{})
	)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPut || r.Header.Get("If-None-Match") != "*" {
				next.ServeHTTP(w, r)
				return
			}
			key := strings.TrimPrefix(r.URL.Path, "/"+testBucket+"/")
			if _, err := (*st).backend.HeadObject(testBucket, key); err == nil {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
			r.Header.Del("If-None-Match")
			mu.Lock()
			arrived++
			if arrived == racers {
				close(gate)
			}
			mu.Unlock()
			<-gate
			next.ServeHTTP(w, r)
		})
	}
}

func TestProbeRefusesNonAtomicConditions(t *testing.T) {
	var st *testStore
	st = newTestStore(t, withHandler(nonAtomic(&st, 4)))
	err := newErr(t, st.config(nil))
	require.ErrorIs(t, err, ErrNoConditionalWrites)
	require.Contains(t, err.Error(), "4 of 4 concurrent create-only PUTs")
}

func TestProbeAcceptsGofakes3(t *testing.T) {
	st := newTestStore(t)
	o := newOpener(t, st.config(nil))
	require.True(t, o.Capabilities().Fencing)
	var keys []string
	require.NoError(t, o.st.list(context.Background(), o.keys.prefix, func(k string) { keys = append(keys, k) }))
	require.Empty(t, keys, "the probe leaves nothing behind")
}

// loseFirstAnswer forwards the first request pick chooses, drops its
// answer (the client sees a reset connection and tries again), and holds
// the others it chooses until that one is in the store.
type loseFirstAnswer struct {
	next   http.RoundTripper
	pick   func(*http.Request) bool
	taken  atomic.Bool
	landed chan struct{}
	picked atomic.Int64
}

func (l *loseFirstAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if !l.pick(r) {
		return l.next.RoundTrip(r)
	}
	l.picked.Add(1)
	if l.taken.CompareAndSwap(false, true) {
		resp, err := l.next.RoundTrip(r)
		if err == nil {
			drain(resp.Body)
		}
		close(l.landed)
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	select {
	case <-l.landed:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return l.next.RoundTrip(r)
}

// A probe PUT that landed and lost its answer is retried by the client
// and meets its own write (412): the probe tells it by the key's body and
// takes the store, as a flush tells its own earlier try by its nonce. (It
// used to refuse the store, as if it did not fence, for a lost answer.)
func TestProbeToleratesLostAnswers(t *testing.T) {
	probePut := func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/_probe/")
	}
	for _, tc := range []struct {
		name string
		pick func(*http.Request) bool
	}{
		{"race winner", func(r *http.Request) bool { return probePut(r) && r.Header.Get("If-None-Match") == "*" }},
		{"If-Match of its ETag", func(r *http.Request) bool {
			m := r.Header.Get("If-Match")
			return probePut(r) && m != "" && m != `"00000000000000000000000000000000"`
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newTestStore(t)
			lose := &loseFirstAnswer{pick: tc.pick, landed: make(chan struct{})}
			o := newOpener(t, st.config(func(rt http.RoundTripper) http.RoundTripper { lose.next = rt; return lose }))
			require.True(t, o.Capabilities().Fencing)
			require.True(t, lose.taken.Load(), "an answer was lost")
			require.GreaterOrEqual(t, lose.picked.Load(), int64(2), "and its PUT tried again")
		})
	}
}

// checkCredentials answers 403 InvalidAccessKeyId to a request signed with
// another access key than the store's (gofakes3 checks none).
func checkCredentials(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Authorization"), "Credential=streamwal/") {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			if r.Method != http.MethodHead {
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS access key Id you provided does not exist in our records.</Message></Error>`))
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

func TestBadBucketIsOneLine(t *testing.T) {
	st := newTestStore(t)
	cfg := st.config(nil)
	cfg.Bucket = "no-such-bucket"
	err := newErr(t, cfg)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	msg := err.Error()
	t.Log(msg)
	require.NotContains(t, msg, "\n")
	require.Contains(t, msg, st.endpoint)
	require.Contains(t, msg, `"no-such-bucket"`)
	require.Contains(t, msg, "404")
}

func TestBadCredentialsAreOneLine(t *testing.T) {
	st := newTestStore(t, withHandler(checkCredentials))
	cfg := st.config(nil)
	cfg.Credentials = credentials.NewStaticCredentialsProvider("intruder", "wrong", "")
	err := newErr(t, cfg)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	msg := err.Error()
	t.Log(msg)
	require.NotContains(t, msg, "\n")
	require.Contains(t, msg, st.endpoint)
	require.Contains(t, msg, "403")
	require.NotContains(t, msg, "wrong", "never the secret")
	require.True(t, errors.Is(err, walimpls.ErrInvalidConfig))

	// The right credentials pass.
	newOpener(t, st.config(nil))
}
