package coordinator

import (
	"time"

	"github.com/streamwal/streamwal/cluster"
)

// silence.go decides when a node that heartbeats on its liveness stream
// has been silent for as long as its lease lasts: pure logic, no I/O, no
// goroutines, the time an input of every call. liveness.go reads the
// sockets and asks etcd; see the package doc, "Failure detection".

// heartbeatsPerTTL is how many heartbeats the leader asks of a node per
// TTL of its lease: the precision of a silence verdict, which comes one
// interval after the TTL at most.
const heartbeatsPerTTL = 40

// heartbeatFor returns the interval the leader asks of a node whose lease
// has ttl: ttl/heartbeatsPerTTL, within [20ms, 1s] and the node's clamp.
func heartbeatFor(ttl time.Duration) time.Duration {
	d := min(max(ttl/heartbeatsPerTTL, 20*time.Millisecond), time.Second)
	return min(max(d, cluster.MinHeartbeat), cluster.MaxHeartbeat)
}

// silence times one registration of a node: what the watch heard of it,
// across the connections the watch makes. Silence is measured on the
// connection in use, from the last byte read on it (or its start): only a
// path that was open can show that the node said nothing.
//
// The limit is the lease's TTL plus one heartbeat interval: a node that
// stopped at S wrote its last heartbeat at S - interval or later, and
// renewed its lease at S or earlier, so its lease expires by S + TTL,
// which is at most last heartbeat + limit. A node stalled for less than
// its TTL is never silent for the limit.
type silence struct {
	ttl   time.Duration
	limit time.Duration // 0: not timed (the node does not heartbeat)
	heard time.Time     // the last byte read, or the start of the connection
	next  time.Time     // when to judge; zero: nothing to judge
	// silent: a verdict was given and the node has not spoken since.
	silent bool
}

// newSilence times a node whose lease has ttl and which was asked for
// heartbeats every interval; ttl 0 times nothing.
func newSilence(ttl, interval time.Duration) *silence {
	s := &silence{ttl: ttl}
	if ttl > 0 {
		s.limit = ttl + interval
	}
	return s
}

// timed reports whether the node's silence is timed at all.
func (s *silence) timed() bool { return s.limit > 0 }

// answered takes the interval the node said it heartbeats at (0: it does
// not): the limit grows with a longer one; without heartbeats, nothing is
// timed any more.
func (s *silence) answered(interval time.Duration) {
	if !s.timed() {
		return
	}
	if interval <= 0 {
		s.limit, s.next = 0, time.Time{}
		return
	}
	s.limit = max(s.limit, s.ttl+interval)
	if !s.silent {
		s.next = s.heard.Add(s.limit)
	}
}

// connected starts measuring on a new connection made at now.
func (s *silence) connected(now time.Time) {
	if now.After(s.heard) {
		s.heard = now
	}
	if s.timed() && !s.silent {
		s.next = s.heard.Add(s.limit)
	}
}

// hear records bytes read from the node at now, and reports whether it
// was silent until then (a verdict was given).
func (s *silence) hear(now time.Time) (resumed bool) {
	resumed = s.silent
	s.silent = false
	if now.After(s.heard) {
		s.heard = now
	}
	if s.timed() {
		s.next = s.heard.Add(s.limit)
	}
	return resumed
}

// due returns when the connection's socket should be looked at next: the
// moment the silence reaches the limit (or a postponed judgement); zero
// when there is nothing to judge.
func (s *silence) due() time.Time { return s.next }

// empty takes the connection's socket found empty at now (nothing
// received and not read), and reports whether the node has been silent
// for the limit: a verdict to confirm (then settle).
func (s *silence) empty(now time.Time) bool {
	return s.timed() && !s.silent && !s.next.IsZero() && !now.Before(s.next) && now.Sub(s.heard) >= s.limit
}

// settle ends a judgement at now: wait 0 gives the verdict (silent until
// the node speaks again); wait > 0 judges again then (etcd says the lease
// still lives, or could not say).
func (s *silence) settle(now time.Time, wait time.Duration) {
	if wait > 0 {
		s.next = now.Add(wait)
		return
	}
	s.silent, s.next = true, time.Time{}
}

// silentFor is how long the node has been silent at now.
func (s *silence) silentFor(now time.Time) time.Duration { return now.Sub(s.heard) }
