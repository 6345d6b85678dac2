package walimplstest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

const (
	// defaultWaitTimeout is the watchdog on every wait: generous, because
	// over-the-wire backends under -race on two cores are slow, but finite.
	defaultWaitTimeout = 30 * time.Second
	// quietPeriod is how long a scanner must stay silent when nothing more
	// may be delivered.
	quietPeriod = 250 * time.Millisecond
	// promptDelivery bounds how long one append may take to reach an idle
	// tailing scanner (capped at a quarter of the wait timeout). Backends
	// that wake their scanners deliver in milliseconds; this catches
	// scanners that poll on a timer of seconds.
	promptDelivery = 5 * time.Second
)

// env is one part's view of a Cluster.
type env struct {
	t    *testing.T
	c    Cluster
	caps walimpls.Capabilities
	// ctx ends with the part. Blocking calls never wait on it alone: each
	// gets the wait timeout (see call and within).
	ctx  context.Context
	opts options
	// batches: the part runs under "Batches", reading through ReadBatches
	// (batches.go); async: under "Async", appending through
	// AppendBatchAsync (async.go).
	batches, async bool

	mu         sync.Mutex
	violations []error // of batch scanners, reported as the part ends
}

// variant is how a part's WALs read and append: as they are, or through
// batch scanners, or through asynchronous appends.
type variant int

const (
	plainVariant variant = iota
	batchesVariant
	asyncVariant
)

func newEnv(t *testing.T, c Cluster, opts options, v variant) *env {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &env{t: t, c: c, ctx: ctx, opts: opts, batches: v == batchesVariant, async: v == asyncVariant}
	// Registered first, so it runs last: after the scanners closed.
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, err := range e.violations {
			t.Errorf("broken promise: %v", err)
		}
	})
	e.caps = e.opener().Capabilities()
	return e
}

// violated records a broken promise found by a goroutine of the suite's
// own, which may not fail the part itself.
func (e *env) violated(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.violations = append(e.violations, err)
}

// prompt is how long an idle tailing scanner may take to deliver one append.
func (e *env) prompt() time.Duration { return min(promptDelivery, e.opts.waitTimeout/4) }

// call returns the context of one blocking call: the wait timeout.
func (e *env) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, e.opts.waitTimeout)
}

// within runs fn with a context of the wait timeout and fails the part if fn
// has not returned shortly after that: a backend that ignores its context,
// or a Close that never returns, fails the part in seconds instead of
// hanging the run until go test's timeout.
func within[T any](e *env, what string, fn func(ctx context.Context) (T, error)) (T, error) {
	e.t.Helper()
	ctx, cancel := e.call()
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		done <- result{v, err}
	}()
	timer := time.NewTimer(e.opts.waitTimeout + time.Second)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		require.FailNowf(e.t, "watchdog", "%s did not return within %s", what, e.opts.waitTimeout)
	}
	var zero T
	return zero, nil
}

// do is within for calls that return only an error.
func (e *env) do(what string, fn func(ctx context.Context) error) error {
	e.t.Helper()
	_, err := within(e, what, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// closeLater closes c when the part ends, reporting (not hanging on) a
// Close that does not return.
func (e *env) closeLater(what string, c func() error) {
	e.t.Cleanup(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c()
		}()
		select {
		case <-done:
		case <-time.After(e.opts.waitTimeout):
			e.t.Errorf("watchdog: Close of %s did not return within %s", what, e.opts.waitTimeout)
		}
	})
}

// opener connects another node; the suite closes it at the end of the part.
func (e *env) opener() walimpls.Opener {
	o := e.c.NewOpener(e.t)
	require.NotNil(e.t, o, "Cluster.NewOpener returned nil")
	e.closeLater("an opener", o.Close)
	return o
}

// tryOpen opens a channel, bounded by the wait timeout; a WAL it returns is
// closed at the end of the part.
func (e *env) tryOpen(o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) (walimpls.WALImpl, error) {
	e.t.Helper()
	ch := walimpls.Channel{Name: name, Term: term, Mode: mode}
	w, err := within(e, "Open "+ch.String(), func(ctx context.Context) (walimpls.WALImpl, error) { return o.Open(ctx, ch) })
	if err == nil && w != nil {
		e.closeLater("WAL "+ch.String(), w.Close)
		// Run starts these variants only for what the backend declares
		// (Implements): a WAL without the interface breaks the
		// declaration, it is no reason to skip.
		if e.batches {
			br, ok := w.(walimpls.BatchReader)
			if !ok {
				require.FailNowf(e.t, "declared interface missing", "the backend declares %s, but its WAL %s (%T) is not a %s",
					BatchRead, ch, w, BatchRead.iface())
			}
			w = &batchedWAL{WALImpl: w, br: br, e: e}
		}
		if e.async {
			aa, ok := w.(walimpls.AsyncAppender)
			if !ok {
				require.FailNowf(e.t, "declared interface missing", "the backend declares %s, but its WAL %s (%T) is not a %s",
					AsyncAppend, ch, w, AsyncAppend.iface())
			}
			w = &asyncWAL{WALImpl: w, aa: aa, e: e}
		}
	}
	return w, err
}

// open opens a channel and closes it at the end of the part.
func (e *env) open(o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	e.t.Helper()
	w, err := e.tryOpen(o, name, term, mode)
	require.NoError(e.t, err, "open %s term %d %s", name, term, mode)
	require.NotNil(e.t, w)
	return w
}

// appendOne appends m, bounded by the wait timeout.
func (e *env) appendOne(w walimpls.WALImpl, m message.Message) (message.ID, error) {
	e.t.Helper()
	return within(e, "Append", func(ctx context.Context) (message.ID, error) { return walimpls.Append(ctx, w, m) })
}

// truncate truncates w, bounded by the wait timeout.
func (e *env) truncate(w walimpls.WALImpl, upTo message.ID) error {
	e.t.Helper()
	return e.do("Truncate", func(ctx context.Context) error { return w.Truncate(ctx, upTo) })
}

// last calls w.Last, bounded by the wait timeout.
func (e *env) last(w walimpls.WALImpl) (message.ID, error) {
	e.t.Helper()
	return within(e, "Last", w.Last)
}

// channelName gives every part its own channel names, also on backends
// that keep state between Clusters.
func channelName(suffix string) string {
	return fmt.Sprintf("conf-%d-%s", time.Now().UnixNano()%1_000_000_000, suffix)
}

// largePayloadSize is 1 MiB or what the backend accepts below that, leaving
// room for properties.
func (e *env) largePayloadSize() int {
	n := 1 << 20
	if m := e.caps.MaxMessageBytes; m > 0 && m-512 < n {
		n = m - 512
	}
	return max(n, 1)
}

func mustMessage(t *testing.T, payload []byte, props map[string]string) message.Message {
	t.Helper()
	m, err := message.New(payload, props)
	require.NoError(t, err)
	return m
}

// appendAll appends sequentially and returns the IDs.
func (e *env) appendAll(w walimpls.WALImpl, msgs []message.Message) []message.ID {
	e.t.Helper()
	ids := make([]message.ID, len(msgs))
	for i, m := range msgs {
		id, err := e.appendOne(w, m)
		require.NoError(e.t, err, "append %d", i)
		require.False(e.t, id.IsZero(), "append %d returned the zero id", i)
		if i > 0 {
			require.Truef(e.t, ids[i-1].LT(id), "append %d: id %s does not follow %s", i, id, ids[i-1])
		}
		ids[i] = id
	}
	return ids
}

// simpleMessages returns n small distinct messages.
func simpleMessages(t *testing.T, tag string, n int) []message.Message {
	msgs := make([]message.Message, n)
	for i := range msgs {
		msgs[i] = mustMessage(t, []byte(tag+"-"+strconv.Itoa(i)), map[string]string{"tag": tag, "i": strconv.Itoa(i)})
	}
	return msgs
}

// tryRead starts a scanner, bounded by the wait timeout; a scanner it
// returns is closed at the end of the part.
func (e *env) tryRead(w walimpls.WALImpl, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	e.t.Helper()
	if opt.Name == "" {
		opt.Name = "conformance"
	}
	s, err := within(e, "Read "+opt.DeliverPolicy.String(), func(ctx context.Context) (walimpls.Scanner, error) { return w.Read(ctx, opt) })
	if err == nil && s != nil {
		e.closeLater("a scanner", s.Close)
	}
	return s, err
}

// read opens a scanner and closes it at the end of the part.
func (e *env) read(w walimpls.WALImpl, p cursor.Policy) walimpls.Scanner {
	e.t.Helper()
	s, err := e.tryRead(w, walimpls.ReadOption{DeliverPolicy: p})
	require.NoError(e.t, err, "read %s", p)
	require.NotNil(e.t, s)
	return s
}

// closeScanner closes s, failing the part if Close does not return.
func (e *env) closeScanner(s walimpls.Scanner) {
	e.t.Helper()
	err := e.do("Scanner.Close", func(context.Context) error { return s.Close() })
	require.NoError(e.t, err, "Scanner.Close")
}

// recv takes n messages from s, failing on the watchdog or an early end.
func (e *env) recv(s walimpls.Scanner, n int) []message.Immutable {
	t := e.t
	t.Helper()
	out := make([]message.Immutable, 0, n)
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				e.waitDone(s)
				require.FailNowf(t, "scanner ended early", "after %d of %d messages: %v", len(out), n, s.Error())
			}
			out = append(out, m)
		case <-timer.C:
			last := "none"
			if len(out) > 0 {
				last = out[len(out)-1].ID().String()
			}
			require.FailNowf(t, "watchdog", "received %d of %d messages in %s (last delivered: %s)", len(out), n, e.opts.waitTimeout, last)
		}
	}
	return out
}

// recvWithin takes one message from s within d.
func (e *env) recvWithin(s walimpls.Scanner, d time.Duration, what string) message.Immutable {
	t := e.t
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case m, ok := <-s.Chan():
		if !ok {
			e.waitDone(s)
			require.FailNowf(t, "scanner ended", "%s: %v", what, s.Error())
		}
		return m
	case <-timer.C:
		require.FailNowf(t, "too slow", "%s: nothing delivered within %s", what, d)
	}
	return message.Immutable{}
}

// quiet fails if s delivers anything (or ends with an error) within
// quietPeriod.
func (e *env) quiet(s walimpls.Scanner) {
	t := e.t
	t.Helper()
	timer := time.NewTimer(quietPeriod)
	defer timer.Stop()
	select {
	case m, ok := <-s.Chan():
		if ok {
			require.FailNowf(t, "unexpected message", "scanner delivered %s (payload %q) when nothing more was due", m.ID(), clip(m.Payload()))
		}
		e.waitDone(s)
		require.FailNowf(t, "scanner ended", "scanner ended while idle: %v", s.Error())
	case <-timer.C:
	}
}

// waitDone waits for Done after Chan closed.
func (e *env) waitDone(s walimpls.Scanner) {
	e.t.Helper()
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	select {
	case <-s.Done():
	case <-timer.C:
		require.FailNow(e.t, "watchdog: Chan closed but Done did not")
	}
}

// sameMessage checks payload and every property, byte for byte.
func sameMessage(t *testing.T, want message.Message, got message.Message, what string) {
	t.Helper()
	if !bytes.Equal(want.Payload(), got.Payload()) {
		require.FailNowf(t, "payload differs", "%s: want %d bytes %q, got %d bytes %q",
			what, len(want.Payload()), clip(want.Payload()), len(got.Payload()), clip(got.Payload()))
	}
	if !maps.Equal(want.Properties().All(), got.Properties().All()) {
		require.FailNowf(t, "properties differ", "%s: want %v, got %v", what, want.Properties().All(), got.Properties().All())
	}
}

// checkSequence checks that got holds exactly the messages of want, in
// order.
func checkSequence(t *testing.T, wantIDs []message.ID, wantMsgs []message.Message, got []message.Immutable) {
	t.Helper()
	require.Len(t, got, len(wantIDs))
	for i := range got {
		require.Truef(t, got[i].ID().EQ(wantIDs[i]), "message %d: want id %s, got %s", i, wantIDs[i], got[i].ID())
		sameMessage(t, wantMsgs[i], got[i].Message, fmt.Sprintf("message %d (%s)", i, got[i].ID()))
	}
}

// expectGone checks that reading from p is ErrPositionGone, from Read or from
// the scanner before it delivers anything.
func (e *env) expectGone(w walimpls.WALImpl, p cursor.Policy) {
	e.t.Helper()
	s, err := e.tryRead(w, walimpls.ReadOption{Name: "gone", DeliverPolicy: p})
	if err != nil {
		require.ErrorIsf(e.t, err, walimpls.ErrPositionGone, "read %s", p)
		return
	}
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	select {
	case m, ok := <-s.Chan():
		require.Falsef(e.t, ok, "read %s below the truncation point delivered %s instead of ErrPositionGone", p, m.ID())
		e.waitDone(s)
		require.ErrorIsf(e.t, s.Error(), walimpls.ErrPositionGone, "read %s", p)
	case <-timer.C:
		require.FailNowf(e.t, "watchdog", "read %s below the truncation point neither failed nor ended", p)
	}
}

// waitClosed waits for s's Chan and Done to close, discarding what it still
// delivers.
func (e *env) waitClosed(s walimpls.Scanner) {
	t := e.t
	t.Helper()
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-s.Chan():
			if ok {
				continue
			}
			select {
			case <-s.Done():
				return
			case <-timer.C:
				require.FailNow(t, "watchdog: Chan closed but Done did not")
			}
		case <-timer.C:
			require.FailNow(t, "watchdog: scanner Chan did not close")
		}
	}
}

func clip(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// randomBytes returns n pseudo-random bytes (incompressible, so that a
// compressing backend cannot hide a size limit).
func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
