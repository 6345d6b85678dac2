package coordinator

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"
	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/utility/backoff"
)

// liveness.go is failure detection's evidence: how a watch follows one
// node's process, and the one thing it takes as proof that the process is
// gone (see the package doc, "Failure detection").

// eventKind is what a watch learned.
type eventKind uint8

const (
	// eventAlive: a liveness stream to the node is established.
	eventAlive eventKind = iota + 1
	// eventSuspect: no stream, and no proof either way (a connection that
	// timed out or was reset, an answer other than 200).
	eventSuspect
	// eventDead: a connection to the node's address was refused: nothing
	// listens there any more, its process is gone.
	eventDead
	// eventSilent: the node, which heartbeats, said nothing on an open
	// connection for its lease's TTL and a heartbeat (silence.go), and
	// etcd did not say its lease still lives: taken as the lease's expiry.
	eventSilent
	// eventHeard: the node spoke again after eventSilent.
	eventHeard
)

func (k eventKind) String() string {
	switch k {
	case eventAlive:
		return "alive"
	case eventSuspect:
		return "suspect"
	case eventDead:
		return "dead"
	case eventSilent:
		return "silent"
	case eventHeard:
		return "heard"
	}
	return "eventKind(?)"
}

// errNotANode: the node refused the liveness stream (403): where it
// verifies client certificates, only a node's may hold it, and the
// certificate this coordinator presents is not one. That proves nothing
// about the node's process.
var errNotANode = errors.New("liveness stream refused: the coordinator's certificate is not a node's")

// liveness watches nodes' processes.
type liveness struct {
	// dial connects to a node's address (a net.Dialer bounded by the probe
	// timeout; tests replace it).
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// timeout bounds writing the request (and the TLS handshake).
	timeout time.Duration
	// tls, when set, is how the node's API is reached: a handshake that
	// fails proves nothing (it is not a refused connection).
	tls *tls.Config
	// retry paces the attempts after one that proved nothing.
	retry backoff.Config
	// clock stamps what the watch reports and times silences.
	clock clockwork.Clock
	log   *slog.Logger
	// leaseLeft asks etcd how long a lease has left, in whole seconds as
	// etcd counts them (zero or less: under a second, or gone); nil:
	// never asked. Set for the leader's watches.
	leaseLeft func(ctx context.Context, lease int64) (time.Duration, error)
	// metrics counts the silences etcd contradicted; nil: not counted.
	metrics *metrics
}

// registration is what a watch follows: one registration of a node.
type registration struct {
	node string
	addr string
	// lease is the node key's lease, ttl its TTL as the node published it
	// (cluster.NodeInfo.LeaseTTL): 0 for a node whose silence is not
	// timed.
	lease int64
	ttl   time.Duration
}

// watch follows the process of the node registered as reg, until its
// death is confirmed or ctx ends, and reports what it learns: alive when
// a liveness stream is established, suspect when an attempt proves
// nothing, silent and heard (below), each only when it changes, and dead
// once, with since, the first sign (the end of the last stream, or the
// start of the watch).
//
// A stream that ends (the process closed it, or died and its kernel did)
// is followed at once by a new connection: that connection is the probe.
// Refused, it is the proof; accepted, the node is alive (a new stream), or
// stalled (the kernel accepts, the process does not answer: the watch
// waits for the answer, without a deadline); anything else proves nothing
// and is tried again with backoff. A stalled or partitioned process is
// never reported dead.
//
// A node that published its lease's TTL is asked for heartbeats, and
// every connection to it is timed (silence.go): once it said nothing on
// an open connection for the TTL and a heartbeat - its socket found empty
// then, not merely a timer fired - it is reported silent, with since the
// last byte heard, unless etcd says its lease has a second or more left
// (then it is judged again when that has passed). Any byte from it after
// that is reported heard. Silence is never proof of death: a silent node
// that speaks again was alive all along, only not heard.
func (l liveness) watch(ctx context.Context, reg registration, report func(kind eventKind, at, since time.Time)) {
	since := l.clock.Now()
	var last eventKind
	tell := func(k eventKind, at, since time.Time) {
		if k != last {
			last = k
			report(k, at, since)
		}
	}
	var interval time.Duration
	if reg.ttl > 0 {
		interval = heartbeatFor(reg.ttl)
	}
	ear := &ear{s: newSilence(reg.ttl, interval), interval: interval, clock: l.clock,
		heard: func(at time.Time) { tell(eventHeard, at, at) },
		judge: func(at time.Time, heard time.Time) time.Duration {
			wait := l.confirm(ctx, reg, at, heard, interval)
			if wait == 0 {
				tell(eventSilent, at, heard)
			}
			return wait
		},
	}
	told := false // errNotANode was logged
	for attempt := 0; ctx.Err() == nil; {
		held, err := l.hold(ctx, reg, ear, func() { tell(eventAlive, l.clock.Now(), since) })
		if ctx.Err() != nil {
			return
		}
		now := l.clock.Now()
		switch {
		case refused(err):
			tell(eventDead, now, since)
			return
		case held:
			// The stream ended: probe at once.
			since, attempt = now, 0
			continue
		}
		if errors.Is(err, errNotANode) && !told {
			// Nothing will change until the certificate does: say it
			// once, loud, rather than at Debug on every attempt.
			told = true
			l.log.Warn("the node refuses this coordinator's liveness stream: its certificate is not a node's "+
				"(walctl certs create-node makes one); failure detection of this node falls back to its lease",
				"node", reg.node, "addr", reg.addr, "error", err)
		}
		l.log.Debug("liveness attempt proved nothing", "node", reg.node, "addr", reg.addr, "error", err)
		tell(eventSuspect, now, since)
		if l.retry.Wait(ctx, attempt) != nil {
			return
		}
		attempt++
	}
}

// confirm asks etcd about the lease of a node found silent at at (last
// heard at heard), and returns 0 to give the verdict, or how long to wait
// before judging again: the lease's time left when etcd says it has a
// second or more (it was renewed: the node runs, only its path to this
// leader is broken, or this leader was not reading), one heartbeat when
// etcd does not answer. At a TTL under two seconds etcd, which counts
// whole seconds, can only say "under a second" of any live lease, so it
// is not asked.
func (l liveness) confirm(ctx context.Context, reg registration, at, heard time.Time, interval time.Duration) time.Duration {
	if l.leaseLeft == nil || reg.lease == 0 || reg.ttl < 2*time.Second {
		return 0
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	left, err := l.leaseLeft(cctx, reg.lease)
	cancel()
	switch {
	case err != nil:
		l.log.Warn("node silent on its liveness stream; etcd cannot say whether its lease lives: judging again",
			"node", reg.node, "silent_for", at.Sub(heard), "error", err)
		return interval
	case left >= time.Second:
		l.log.Warn("node silent on its liveness stream, but etcd says its lease was renewed: it keeps its channels",
			"node", reg.node, "silent_for", at.Sub(heard), "lease_left", left)
		if l.metrics != nil {
			l.metrics.silences.WithLabelValues(silenceLeaseAlive).Inc()
		}
		return left
	}
	return 0
}

// hold connects to reg's address, asks for the node's liveness stream and
// reads it until it ends. held reports whether the stream was established
// (then established was called); err is why it ended, or why it could not
// start. The connection is timed by ear when the node's silence is.
func (l liveness) hold(ctx context.Context, reg registration, ear *ear, established func()) (held bool, err error) {
	raw, err := l.dial(ctx, reg.addr)
	if err != nil {
		return false, err
	}
	defer func() { _ = raw.Close() }()
	defer context.AfterFunc(ctx, func() { _ = raw.Close() })()
	conn := raw
	timed := ear.s.timed() && peekable(raw)
	if timed {
		ear.s.connected(l.clock.Now())
		conn = &earConn{Conn: raw, ear: ear}
	}
	scheme := "http"
	if l.tls != nil {
		scheme = "https"
		cfg := l.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(reg.addr)
		}
		cfg.NextProtos = []string{"http/1.1"} // the stream below is HTTP/1.1
		tc := tls.Client(conn, cfg)
		_ = conn.SetDeadline(l.clock.Now().Add(l.timeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			return false, errors.Wrap(err, "liveness tls handshake")
		}
		_ = conn.SetDeadline(time.Time{})
		conn = tc
	}

	q := url.Values{"node": {reg.node}}
	if timed {
		q.Set(cluster.LivenessHeartbeat, ear.interval.String())
	}
	u := url.URL{Scheme: scheme, Host: reg.addr, Path: cluster.LivenessPath, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, errors.Wrap(err, "liveness request")
	}
	_ = conn.SetWriteDeadline(l.clock.Now().Add(l.timeout))
	if err := req.Write(conn); err != nil {
		return false, errors.Wrap(err, "send liveness request")
	}
	_ = conn.SetWriteDeadline(time.Time{})
	// No read deadline: a stalled process answers when it runs again
	// (when timed, the ear judges its silence meanwhile).
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return false, errors.Wrap(err, "read liveness answer")
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusForbidden {
		return false, errors.Wrapf(errNotANode, "liveness answer %s", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return false, errors.Newf("liveness answer %s", resp.Status)
	}
	if timed {
		beat, _ := time.ParseDuration(resp.Header.Get(cluster.LivenessHeartbeatHeader))
		if beat <= 0 {
			l.log.Warn("node published its lease's TTL but does not heartbeat: only its lease times its silence",
				"node", reg.node, "addr", reg.addr)
		}
		ear.s.answered(beat)
	}
	established()
	_, err = io.Copy(io.Discard, resp.Body)
	if err == nil {
		err = io.EOF
	}
	return true, err
}

// ear times the silence of one registration of a node across the
// connections of its watch; only the watch's goroutine uses it.
type ear struct {
	s *silence
	// interval is the heartbeat interval asked of the node.
	interval time.Duration
	clock    clockwork.Clock
	// heard is called when the node speaks after a verdict.
	heard func(at time.Time)
	// judge confirms a verdict on a node found silent at at, last heard at
	// heard: 0 gives it (and reports it), else judge again after that.
	judge func(at, heard time.Time) time.Duration
}

// earConn is a connection to a node whose silence is timed: every byte
// read from it is heard, and no read waits past the moment the silence
// reaches its limit. Then the socket itself is looked at (pending): the
// timer proves nothing by itself - this process may be the one that
// stalled, with the node's heartbeats waiting in its socket, unread, when
// the timer fires. Only a socket found empty, at a moment the silence had
// reached the limit, is a silence. The caller's deadlines are kept.
type earConn struct {
	net.Conn
	ear *ear
	// deadline is the read deadline the caller set (zero: none).
	deadline time.Time
}

func (c *earConn) SetDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetDeadline(t)
}

func (c *earConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

func (c *earConn) Read(p []byte) (int, error) {
	look := true // the silence's due time bounds this read
	for {
		deadline, bySilence := c.deadline, false
		if due := c.ear.s.due(); look && !due.IsZero() && (deadline.IsZero() || due.Before(deadline)) {
			// due is on the ear's clock, the socket's deadline on the
			// machine's.
			deadline, bySilence = time.Now().Add(due.Sub(c.ear.clock.Now())), true
		}
		_ = c.Conn.SetReadDeadline(deadline)
		n, err := c.Conn.Read(p)
		if n > 0 {
			now := c.ear.clock.Now()
			if c.ear.s.hear(now) {
				c.ear.heard(now)
			}
			return n, err
		}
		if !bySilence || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		at := c.ear.clock.Now()
		_ = c.Conn.SetReadDeadline(c.deadline)
		if pending(c.Conn) {
			look = false // read what waits
			continue
		}
		if c.ear.s.empty(at) {
			heard := c.ear.s.heard
			c.ear.s.settle(at, c.ear.judge(at, heard))
		}
	}
}

// peekable reports whether pending can look into conn's socket (a TCP
// connection can; silence is not timed on others).
func peekable(conn net.Conn) bool {
	_, ok := conn.(syscall.Conn)
	return ok
}

// pending reports whether conn's socket holds anything for a read - bytes
// received and not read, the peer's end, an error - without reading it
// and without waiting: false only for a socket found empty.
func pending(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return true // look once, never wait
	})
	return err != nil || !errors.Is(perr, unix.EAGAIN)
}

// refused reports whether err is a connection refused: the address's host
// answered that nothing listens on the port.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// dialer returns the dial of liveness in production: TCP, bounded by
// timeout, with the kernel's keepalives (a peer gone without a word ends
// the stream eventually; that proves nothing either).
func dialer(timeout time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}
}
