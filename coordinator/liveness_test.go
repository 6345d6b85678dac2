package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/utility/backoff"
)

// offsetClock is the machine's clock, moved forward at will: what a
// process that was stopped for that long sees when it runs again. It keeps
// running with real time (a frozen fake clock would not: the ear maps its
// due time onto the socket's real deadline), so it wraps the real clock
// and offsets what it reads; timers and tickers, relative, need no offset.
type offsetClock struct {
	clockwork.Clock
	off atomic.Int64
}

func newOffsetClock() *offsetClock { return &offsetClock{Clock: clockwork.NewRealClock()} }

func (c *offsetClock) Now() time.Time                  { return c.Clock.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
func (c *offsetClock) jump(d time.Duration)            { c.off.Add(int64(d)) }

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// waitPending waits until bytes sent to conn are in its socket (a
// condition, polled).
func waitPending(t *testing.T, conn net.Conn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !pending(conn) {
		require.True(t, time.Now().Before(deadline), "the bytes never reached the socket")
		time.Sleep(time.Millisecond)
	}
}

// testEar times a connection made now at a 1 s TTL and 25 ms heartbeats,
// on clock; judge and heard are the test's.
func testEar(clock *offsetClock, judge func(at, heard time.Time) time.Duration, heard func(time.Time)) *ear {
	e := &ear{s: newSilence(time.Second, 25*time.Millisecond), interval: 25 * time.Millisecond, clock: clock,
		judge: judge, heard: heard}
	e.s.connected(clock.Now())
	return e
}

// The coordinator's own stall is not the node's silence: heartbeats that
// arrived while this process did not run are in its socket when its
// timer fires, and are read, not judged.
func TestEarReadsWhatWaited(t *testing.T) {
	clock := newOffsetClock()
	client, server := tcpPair(t)
	e := testEar(clock, func(at, heard time.Time) time.Duration {
		t.Errorf("judged silent at %s: a heartbeat waited in the socket", at)
		return 0
	}, func(time.Time) { t.Error("heard after a verdict that was never given") })
	conn := &earConn{Conn: client, ear: e}

	_, err := server.Write([]byte("\n"))
	require.NoError(t, err)
	waitPending(t, client)
	clock.jump(time.Minute) // this process stalled for a minute
	buf := make([]byte, 8)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "\n", string(buf[:n]))
	require.True(t, e.s.due().After(clock.Now()), "heard when read: the silence starts again from then")
}

// A node that sent nothing for the limit, its socket found empty, is
// judged; a judgement postponed (etcd says its lease lives) is made again
// later; the verdict holds until the node speaks, and its first byte
// after it is heard.
func TestEarSilence(t *testing.T) {
	clock := newOffsetClock()
	client, server := tcpPair(t)
	var judged, heard []time.Time
	e := testEar(clock, func(at, last time.Time) time.Duration {
		judged = append(judged, at)
		require.GreaterOrEqual(t, at.Sub(last), time.Second+25*time.Millisecond)
		if len(judged) == 1 {
			return time.Millisecond // "the lease lives": judge again soon
		}
		// The verdict; then the node runs again.
		_, err := server.Write([]byte("\n"))
		require.NoError(t, err)
		return 0
	}, func(at time.Time) { heard = append(heard, at) })
	conn := &earConn{Conn: client, ear: e}

	clock.jump(time.Minute)
	buf := make([]byte, 8)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "\n", string(buf[:n]))
	require.Len(t, judged, 2, "judged, postponed, judged again")
	require.Len(t, heard, 1, "the byte after the verdict ends the silence")
	require.False(t, e.s.silent)
}

// The caller's deadline is kept: a read past it ends with a timeout,
// whatever the silence; the node's end is returned as it comes.
func TestEarCallerDeadline(t *testing.T) {
	clock := newOffsetClock()
	client, server := tcpPair(t)
	e := testEar(clock, func(time.Time, time.Time) time.Duration {
		t.Error("judged before the caller's deadline")
		return 0
	}, func(time.Time) {})
	conn := &earConn{Conn: client, ear: e}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err := conn.Read(make([]byte, 8))
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)

	require.NoError(t, conn.SetDeadline(time.Time{}))
	require.NoError(t, server.Close())
	clock.jump(time.Minute)
	_, err = conn.Read(make([]byte, 8))
	require.Error(t, err, "the end, not a silence")
}

// A watch over a node that heartbeats: silent (since its last heartbeat)
// once it stops for its TTL and a heartbeat, heard when it runs again; the
// stream stays the same one throughout. A node that does not heartbeat
// although asked is not judged, however long it stalls.
func TestWatchSilence(t *testing.T) {
	t.Parallel()
	l := startLivenessServer(t, "n1")
	l.beating.Store(true)
	type event struct {
		kind      eventKind
		at, since time.Time
	}
	events := make(chan event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lv := liveness{dial: dialer(time.Second), timeout: time.Second, clock: clockwork.NewRealClock(),
		log: slog.New(slog.DiscardHandler), retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
	// ttl below etcd's whole seconds: a test's, for speed (limit 220 ms).
	reg := registration{node: "n1", addr: l.addr(), lease: 1, ttl: 200 * time.Millisecond}
	go func() {
		defer close(done)
		lv.watch(ctx, reg, func(k eventKind, at, since time.Time) { events <- event{k, at, since} })
	}()
	defer func() { cancel(); <-done }()
	next := func() event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(30 * time.Second):
			t.Fatal("no liveness event")
			return event{}
		}
	}
	require.Equal(t, eventAlive, next().kind)
	for l.beats.Load() < 3 {
		time.Sleep(5 * time.Millisecond) // a condition, polled
	}

	l.stall()
	ev := next()
	require.Equal(t, eventSilent, ev.kind)
	require.GreaterOrEqual(t, ev.at.Sub(ev.since), 220*time.Millisecond, "silent for the TTL and a heartbeat")
	l.resume()
	require.Equal(t, eventHeard, next().kind)
	require.EqualValues(t, 1, l.served.Load(), "one stream throughout")
	cancel()
	<-done

	// Asked, but not heartbeating: not timed.
	l2 := startLivenessServer(t, "n2")
	quiet := liveness{dial: dialer(time.Second), timeout: time.Second, clock: clockwork.NewRealClock(),
		log: slog.New(slog.DiscardHandler), retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
	e := &ear{s: newSilence(200*time.Millisecond, 20*time.Millisecond), interval: 20 * time.Millisecond, clock: clockwork.NewRealClock(),
		judge: func(time.Time, time.Time) time.Duration { t.Error("judged a node that does not heartbeat"); return 0 },
		heard: func(time.Time) {}}
	hctx, hcancel := context.WithCancel(context.Background())
	defer hcancel()
	held, err := quiet.hold(hctx, registration{node: "n2", addr: l2.addr(), lease: 1, ttl: 200 * time.Millisecond}, e, func() {
		require.False(t, e.s.timed(), "no heartbeat in the answer: not timed")
		hcancel()
	})
	require.True(t, held)
	require.Error(t, err)
}

// warnings counts the Warn records whose message contains a text.
type warnings struct {
	text string
	n    atomic.Int64
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, w.text) {
		w.n.Add(1)
	}
	return nil
}

// A node that refuses the liveness stream (403: the coordinator's
// certificate is not a node's) is suspect, never dead nor alive, and the
// watch says why once, at Warn, however often it tries.
func TestWatchRefusedNotANode(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "only a node may hold it", http.StatusForbidden)
	}))
	defer srv.Close()
	warned := &warnings{text: "certificate is not a node's"}
	lv := liveness{dial: dialer(time.Second), timeout: time.Second, clock: clockwork.NewRealClock(), log: slog.New(warned),
		retry: backoff.Config{Initial: time.Millisecond, Max: time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan eventKind, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lv.watch(ctx, registration{node: "n1", addr: srv.Listener.Addr().String()}, func(k eventKind, _, _ time.Time) { events <- k })
	}()
	require.Equal(t, eventSuspect, <-events)
	require.Eventually(t, func() bool { return asked.Load() >= 5 }, 10*time.Second, time.Millisecond)
	cancel()
	<-done
	require.Empty(t, events, "suspect only, reported once")
	require.EqualValues(t, 1, warned.n.Load())
}
