package s3test

import (
	"context"
	"encoding/xml"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is an HTTP proxy in front of a Store that injects faults into the
// requests its rules choose, and records every request. Store gives the
// Store a client under test should use; requests reach the target store
// unchanged (the Host header too, so signatures stay valid).
//
// Faults are deterministic: a rule chooses requests by what they are and
// by their count (Nth, FirstN) or a seeded draw (Probability), never by
// time, and a held request waits for the test (Gate), not for a timer.
type Proxy struct {
	target *Store
	store  *Store
	base   string // the target's scheme://host
	tr     *http.Transport
	srv    *http.Server
	ctx    context.Context // ended when the proxy closes: held requests end
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	rules    []ruleEntry
	nextRule int
	log      []*Request
	hooks    []func(Request)
	handlers sync.WaitGroup // requests in the handler; Add only under mu while !closed
}

type ruleEntry struct {
	id int
	Rule
}

// NewProxy starts a proxy in front of target on a loopback port, with
// rules (more can be added later with Add). tb's cleanup closes it: held
// requests end without an answer, and it waits for every request and
// goroutine it started.
func NewProxy(tb testing.TB, target *Store, rules ...Rule) *Proxy {
	tb.Helper()
	u, err := url.Parse(target.Endpoint)
	if err != nil {
		tb.Fatalf("s3test: proxy target %q: %v", target.Endpoint, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("s3test: listen: %v", err)
	}
	p := &Proxy{
		target: target,
		base:   u.Scheme + "://" + u.Host,
		// Bodies go through untouched: no compression negotiated here.
		tr: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 32,
			ResponseHeaderTimeout: 2 * time.Minute},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	st := *target
	st.Name = target.Name + "+proxy"
	st.Endpoint = "http://" + ln.Addr().String()
	p.store = &st
	p.Add(rules...)
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = p.srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		_ = p.srv.Close()
		<-served
		p.handlers.Wait()
		p.tr.CloseIdleConnections()
	})
	return p
}

// Store is the store as seen through the proxy.
func (p *Proxy) Store() *Store { return p.store }

// Add adds rules after the existing ones; remove takes them out again.
func (p *Proxy) Add(rules ...Rule) (remove func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []int
	for _, r := range rules {
		p.rules = append(p.rules, ruleEntry{id: p.nextRule, Rule: r})
		ids = append(ids, p.nextRule)
		p.nextRule++
	}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.rules = slices.DeleteFunc(p.rules, func(e ruleEntry) bool { return slices.Contains(ids, e.id) })
	}
}

// OnRequest calls f with every request as it arrives, once the rules chose
// its faults and before they act, from the request's goroutine (so
// concurrently for concurrent requests). f may call the proxy's methods.
func (p *Proxy) OnRequest(f func(Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hooks = append(p.hooks, f)
}

// Requests returns every request so far, in arrival order, as it stands.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, len(p.log))
	for i, r := range p.log {
		out[i] = *r
		out[i].Faults = slices.Clone(r.Faults)
	}
	return out
}

// Count is how many requests with method on key arrived so far; "" for
// either counts all.
func (p *Proxy) Count(method, key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.log {
		if (method == "" || r.Method == method) && (key == "" || r.Key == key) {
			n++
		}
	}
	return n
}

// ServeHTTP is the proxy's handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	req := &Request{Method: r.Method, Bucket: bucket, Key: key, Query: r.URL.Query(), Header: r.Header.Clone()}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		breakConn(w, false)
		return
	}
	req.Index = len(p.log)
	var faults []Fault
	for _, e := range p.rules {
		if e.Match == nil || e.Match(*req) {
			faults = append(faults, e.Fault)
			req.Faults = append(req.Faults, e.Fault.name)
		}
	}
	p.log = append(p.log, req)
	hooks := slices.Clone(p.hooks)
	view := *req
	view.Faults = slices.Clone(req.Faults)
	p.handlers.Add(1)
	p.mu.Unlock()
	defer p.handlers.Done()

	// The request is recorded as done before the client can learn its
	// outcome: a test that saw the answer (or its absence) sees it in
	// Requests.
	finish := func(status int) {
		p.mu.Lock()
		req.Status, req.Done = status, true
		p.mu.Unlock()
	}
	p.serve(w, r, faults, hooks, view, finish)
}

// serve does what faults say with r; it calls finish with the status the
// client gets (0: none) just before the client can see it.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, faults []Fault, hooks []func(Request), view Request, finish func(int)) {
	for _, h := range hooks {
		h(view)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	abort := func(reset bool) {
		finish(0)
		breakConn(w, reset)
	}

	for _, f := range faults {
		if f.before != nil {
			if err := f.before(ctx); err != nil {
				abort(false)
				return
			}
		}
	}
	for _, f := range faults {
		if f.answer != nil {
			_, _ = io.Copy(io.Discard, r.Body)
			status, code, msg, ok := f.answer()
			if !ok {
				abort(false)
				return
			}
			finish(status)
			writeError(w, r, status, code, msg)
			return
		}
	}

	resp, body, err := p.forward(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			abort(false)
			return
		}
		finish(http.StatusBadGateway)
		writeError(w, r, http.StatusBadGateway, "BadGateway", "s3test proxy: "+err.Error())
		return
	}
	for _, f := range faults {
		if f.after != nil {
			if err := f.after(ctx); err != nil {
				abort(false)
				return
			}
		}
	}
	for _, f := range faults {
		if f.reset {
			abort(true)
			return
		}
	}
	for k, vs := range resp.Header {
		if !hopByHop(k) {
			w.Header()[k] = vs
		}
	}
	finish(resp.StatusCode)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// forward sends r to the target and returns its answer, the body read
// whole (so that the store is done with the request).
func (p *Proxy) forward(ctx context.Context, r *http.Request) (*http.Response, []byte, error) {
	u, err := url.Parse(p.base + r.RequestURI)
	if err != nil {
		return nil, nil, err
	}
	var body io.Reader = r.Body
	if r.ContentLength == 0 {
		body = http.NoBody
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), body)
	if err != nil {
		return nil, nil, err
	}
	out.URL = u // keeps the client's escaping of the key, which it signed
	out.Host = r.Host
	out.ContentLength = r.ContentLength
	for k, vs := range r.Header {
		if !hopByHop(k) && k != "Expect" {
			out.Header[k] = vs
		}
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return resp, b, nil
}

func hopByHop(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// writeError answers with an S3 error document.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	type s3Error struct {
		XMLName   xml.Name `xml:"Error"`
		Code      string
		Message   string
		RequestID string `xml:"RequestId"`
	}
	b, _ := xml.Marshal(s3Error{Code: code, Message: msg, RequestID: "s3test-proxy"})
	b = append([]byte(xml.Header), b...)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Amz-Request-Id", "s3test-proxy")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// breakConn closes the client's connection without an answer: with a
// reset (RST) when reset, else with a plain close.
func breakConn(w http.ResponseWriter, reset bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // the server closes the connection
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok && reset {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}
