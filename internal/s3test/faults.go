package s3test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Request is a request as the proxy saw it arrive, and, in Proxy.Requests,
// how it ended.
type Request struct {
	// Index counts the proxy's requests from 0, in arrival order.
	Index int
	// Method is the HTTP method; Bucket and Key come from the path
	// (path-style addressing): Key is "" for a request on the bucket
	// (a listing, DeleteObjects, HeadBucket).
	Method      string
	Bucket, Key string
	// Query is the URL's query ("list-type", "prefix", "delete", ...).
	Query url.Values
	// Header is the request's header.
	Header http.Header
	// Faults names the faults the rules applied, in order.
	Faults []string
	// Status is the status the client was answered with; 0 while the
	// request is in the proxy, or when the client got no answer (dropped,
	// reset, or gone).
	Status int
	// Done is true once the proxy decided the request's outcome: it is
	// set before the client can see that outcome, so a client that got an
	// answer (or lost its connection) finds its request Done.
	Done bool
}

// A Matcher chooses requests. Matchers built with Nth, FirstN and
// Probability keep state (a count, a random source): each counts or draws
// only for the requests it is asked about, in arrival order, under the
// proxy's lock. Every rule's Matcher is asked about every request, so one
// rule's counts do not depend on the others; inside And and Or, a matcher
// is asked only when those before it did not decide (put Nth last in an
// And to count among the requests the others let through).
type Matcher func(Request) bool

// Method matches requests of any of the methods ("PUT", "GET", ...).
func Method(methods ...string) Matcher {
	return func(r Request) bool { return slices.Contains(methods, r.Method) }
}

// Key matches requests on exactly key.
func Key(key string) Matcher { return func(r Request) bool { return r.Key == key } }

// KeyPrefix matches requests on a key that starts with prefix.
func KeyPrefix(prefix string) Matcher {
	return func(r Request) bool { return r.Key != "" && strings.HasPrefix(r.Key, prefix) }
}

// KeySuffix matches requests on a key that ends with suffix.
func KeySuffix(suffix string) Matcher {
	return func(r Request) bool { return r.Key != "" && strings.HasSuffix(r.Key, suffix) }
}

// KeyMatches matches requests on a key re matches.
func KeyMatches(re *regexp.Regexp) Matcher {
	return func(r Request) bool { return r.Key != "" && re.MatchString(r.Key) }
}

// HasQuery matches requests whose URL has the query parameter name
// ("list-type" for ListObjectsV2, "delete" for DeleteObjects).
func HasQuery(name string) Matcher { return func(r Request) bool { return r.Query.Has(name) } }

// Header matches requests with header name set (to anything):
// Header("If-None-Match") chooses create-only PUTs.
func Header(name string) Matcher { return func(r Request) bool { return r.Header.Get(name) != "" } }

// Nth matches the requests that are the n-th (from 0) it is asked about,
// for each n in ns.
func Nth(ns ...int) Matcher {
	i := -1
	return func(Request) bool {
		i++
		return slices.Contains(ns, i)
	}
}

// FirstN matches the first n requests it is asked about.
func FirstN(n int) Matcher {
	i := 0
	return func(Request) bool {
		i++
		return i <= n
	}
}

// Probability matches each request it is asked about with probability p,
// drawn from a source seeded with seed: the same seed and the same order
// of requests choose the same ones.
func Probability(p float64, seed uint64) Matcher {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	return func(Request) bool { return rng.Float64() < p }
}

// And matches requests every m matches, asking them in order until one
// says no.
func And(ms ...Matcher) Matcher {
	return func(r Request) bool {
		for _, m := range ms {
			if !m(r) {
				return false
			}
		}
		return true
	}
}

// Or matches requests any m matches, asking them in order until one says
// yes.
func Or(ms ...Matcher) Matcher {
	return func(r Request) bool {
		for _, m := range ms {
			if m(r) {
				return true
			}
		}
		return false
	}
}

// Not matches the requests m does not.
func Not(m Matcher) Matcher { return func(r Request) bool { return !m(r) } }

// A Rule applies Fault to the requests Match chooses (nil Match: all).
// When several rules choose a request, each fault does its part in rule
// order: the holds and delays before the request goes on (each in turn),
// then the first answer in place of the store's (Drop, SlowDown,
// InternalError, Respond), else the request goes to the store, then the
// holds of the answer, then the answer (or, with ResetAfterWrite, none).
type Rule struct {
	Match Matcher
	Fault Fault
}

// A Fault is what a rule does to a request; build one with Hold,
// HoldAnswer, Delay, Drop, Respond, SlowDown, InternalError or
// ResetAfterWrite.
type Fault struct {
	name string
	// before waits before the request goes on; an error means the client
	// or the proxy gave up.
	before func(ctx context.Context) error
	// answer, when set, answers in place of the store; ok false means:
	// break the connection without an answer.
	answer func() (status int, code, message string, ok bool)
	// after waits between the store's answer and the client's.
	after func(ctx context.Context) error
	// reset breaks the connection instead of passing the store's answer
	// on.
	reset bool
}

// Hold keeps the request from the store until g lets it through.
func Hold(g *Gate) Fault {
	return Fault{name: "hold", before: g.pass}
}

// HoldAnswer passes the request to the store at once and keeps the store's
// answer from the client until g lets it through: the object is written
// while its writer still waits.
func HoldAnswer(g *Gate) Fault {
	return Fault{name: "hold-answer", after: g.pass}
}

// Delay keeps the request from the store for d.
func Delay(d time.Duration) Fault {
	return Fault{name: "delay", before: func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
}

// Drop reads the request and closes its connection without an answer; the
// store never sees it. Go's http.Transport sends a GET or HEAD dropped on a
// reused connection once more by itself: the proxy counts both.
func Drop() Fault {
	return Fault{name: "drop", answer: func() (int, string, string, bool) { return 0, "", "", false }}
}

// Respond answers the request with status and an S3 error of code and
// message, without passing it to the store.
func Respond(status int, code, message string) Fault {
	return Fault{name: "respond-" + code, answer: func() (int, string, string, bool) { return status, code, message, true }}
}

// SlowDown answers 503 SlowDown, S3's "reduce your request rate", without
// passing the request to the store.
func SlowDown() Fault {
	return Respond(http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
}

// InternalError answers 500 InternalError without passing the request to
// the store.
func InternalError() Fault {
	return Respond(http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
}

// ResetAfterWrite passes the request to the store, waits for its answer
// (so a PUT is written), and then resets the client's connection instead
// of answering.
func ResetAfterWrite() Fault {
	return Fault{name: "reset-after-write", reset: true}
}

// A Gate holds requests (Hold, HoldAnswer) until the test lets them
// through: Release lets every one through, now and later; Let lets the
// next n through in arrival order. WaitArrived tells the test that a
// request is held. A held request also ends when its client gives up or
// the proxy closes. A Gate may serve several rules and proxies.
type Gate struct {
	mu      sync.Mutex
	arrived int  // requests that came to the gate
	let     int  // of them, those let through by Let, in arrival order
	open    bool // Release was called
	changed chan struct{}
}

// NewGate returns a closed gate.
func NewGate() *Gate { return &Gate{changed: make(chan struct{})} }

// Release lets every held request through, and every later one.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
	g.broadcast()
}

// Let lets the next n held requests through, in the order they arrived
// (also those that arrive later).
func (g *Gate) Let(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.let += n
	g.broadcast()
}

// Arrived is how many requests came to the gate so far.
func (g *Gate) Arrived() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived
}

// WaitArrived waits until n requests came to the gate in all.
func (g *Gate) WaitArrived(ctx context.Context, n int) error {
	for {
		g.mu.Lock()
		arrived, changed := g.arrived, g.changed
		g.mu.Unlock()
		if arrived >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// broadcast wakes every waiter. Called with g.mu held.
func (g *Gate) broadcast() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// pass holds a request until the gate lets it through or ctx ends.
func (g *Gate) pass(ctx context.Context) error {
	g.mu.Lock()
	ticket := g.arrived
	g.arrived++
	g.broadcast()
	g.mu.Unlock()
	for {
		g.mu.Lock()
		through, changed := g.open || ticket < g.let, g.changed
		g.mu.Unlock()
		if through {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
