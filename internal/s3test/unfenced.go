package s3test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Stores that do not fence, for the tests of the backend's probe: each is
// gofakes3 behind a handler that changes what it does with conditional
// PUTs (If-None-Match, If-Match on PutObject). Both kinds exist in the
// field (seaweedfs#8800, rustfs#1659, mountx#19, versitygw before PR
// #2288).

// FakeIgnoringConditions starts gofakes3 like Fake behind
// IgnoreConditions: every conditional PUT is written, whatever is there.
func FakeIgnoringConditions(tb testing.TB) *Store {
	tb.Helper()
	return fake(tb, "gofakes3-ignoring-conditions", IgnoreConditions)
}

// FakeNonAtomic starts gofakes3 like Fake behind
// NonAtomicConditions(racers): conditions are checked, then written
// without a lock, so that the first racers conditional PUTs of a key all
// pass.
func FakeNonAtomic(tb testing.TB, racers int) *Store {
	tb.Helper()
	return fake(tb, "gofakes3-non-atomic", NonAtomicConditions(racers))
}

// IgnoreConditions wraps a store's handler so that it ignores
// If-None-Match and If-Match on PUT: it takes them off before the store
// sees the request.
func IgnoreConditions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isConditionalPut(r) {
			r = withoutConditions(r)
		}
		next.ServeHTTP(w, r)
	})
}

// NonAtomicConditions wraps a store's handler so that it applies
// If-None-Match: * and If-Match on PUT itself, and not atomically: it
// checks the condition against the object as a HEAD finds it, then writes
// without the condition. Between the check and the write is a window
// that, for each key, the first racers conditional PUTs that pass the
// check wait in for each other, so that all of them write: of racers (or
// more) create-only PUTs sent at once to a new key, at least racers
// succeed. Later ones pass as soon as they pass the check, so that none
// waits for a racer that never comes. A failed check is 412
// PreconditionFailed, as gofakes3 answers (also If-Match on a missing
// key). Beware: a lone conditional PUT of a key, one that no other races,
// waits in the window until its client gives up.
func NonAtomicConditions(racers int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return &nonAtomic{next: next, racers: racers, windows: map[string]chan struct{}{}, passed: map[string]int{}}
	}
}

type nonAtomic struct {
	next   http.Handler
	racers int

	mu      sync.Mutex
	windows map[string]chan struct{} // by path: closed once racers passed the check
	passed  map[string]int           // by path: conditional PUTs that passed the check
}

func (n *nonAtomic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isConditionalPut(r) {
		n.next.ServeHTTP(w, r)
		return
	}
	if !n.check(r) {
		writeError(w, r, http.StatusPreconditionFailed, "PreconditionFailed",
			"At least one of the pre-conditions you specified did not hold")
		return
	}
	n.mu.Lock()
	window, ok := n.windows[r.URL.Path]
	if !ok {
		window = make(chan struct{})
		n.windows[r.URL.Path] = window
	}
	n.passed[r.URL.Path]++
	if n.passed[r.URL.Path] == n.racers {
		close(window)
	}
	n.mu.Unlock()
	select {
	case <-window:
	case <-r.Context().Done():
		return // the client gave up
	}
	n.next.ServeHTTP(w, withoutConditions(r))
}

// check reports whether r's conditions hold for the object as it is now.
func (n *nonAtomic) check(r *http.Request) bool {
	head, err := http.NewRequestWithContext(r.Context(), http.MethodHead, r.URL.EscapedPath(), nil)
	if err != nil {
		return false
	}
	head.Host = r.Host
	rec := &headRecorder{header: http.Header{}}
	n.next.ServeHTTP(rec, head)
	exists := rec.status == http.StatusOK || rec.status == 0 // 0: no WriteHeader, so 200
	if r.Header.Get("If-None-Match") == "*" && exists {
		return false
	}
	if m := r.Header.Get("If-Match"); m != "" {
		return exists && strings.Trim(m, `"`) == strings.Trim(rec.header.Get("ETag"), `"`)
	}
	return true
}

// headRecorder keeps the status and header of the store's answer to a
// HEAD.
type headRecorder struct {
	header http.Header
	status int
}

func (h *headRecorder) Header() http.Header { return h.header }

func (h *headRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

func (h *headRecorder) Write(p []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(p), nil
}

// isConditionalPut reports a PutObject (not an UploadPart) with
// If-None-Match or If-Match.
func isConditionalPut(r *http.Request) bool {
	if r.Method != http.MethodPut || r.URL.Query().Has("partNumber") {
		return false
	}
	return r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Match") != ""
}

func withoutConditions(r *http.Request) *http.Request {
	r = r.Clone(r.Context())
	r.Header.Del("If-None-Match")
	r.Header.Del("If-Match")
	return r
}
