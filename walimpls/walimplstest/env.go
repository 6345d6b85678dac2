package walimplstest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
)

// env is one part's view of a Cluster.
type env struct {
	t    *testing.T
	c    Cluster
	caps walimpls.Capabilities
	ctx  context.Context
	opts options
}

func newEnv(t *testing.T, c Cluster, opts options) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 5*opts.waitTimeout)
	t.Cleanup(cancel)
	e := &env{t: t, c: c, ctx: ctx, opts: opts}
	e.caps = e.opener().Capabilities()
	return e
}

// opener connects another node; the suite closes it at the end of the part.
func (e *env) opener() walimpls.Opener {
	o := e.c.NewOpener(e.t)
	require.NotNil(e.t, o, "Cluster.NewOpener returned nil")
	e.t.Cleanup(func() { _ = o.Close() })
	return o
}

// open opens a channel and closes it at the end of the part.
func (e *env) open(o walimpls.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	e.t.Helper()
	w, err := o.Open(e.ctx, walimpls.Channel{Name: name, Term: term, Mode: mode})
	require.NoError(e.t, err, "open %s term %d %s", name, term, mode)
	require.NotNil(e.t, w)
	e.t.Cleanup(func() { _ = w.Close() })
	return w
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
		id, err := w.Append(e.ctx, m)
		require.NoError(e.t, err, "append %d", i)
		require.False(e.t, id.IsZero(), "append %d returned the zero id", i)
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

// read opens a scanner and closes it at the end of the part.
func (e *env) read(w walimpls.WALImpl, p walimpls.DeliverPolicy) walimpls.Scanner {
	e.t.Helper()
	s, err := w.Read(e.ctx, walimpls.ReadOption{Name: "conformance", DeliverPolicy: p})
	require.NoError(e.t, err, "read %s", p)
	require.NotNil(e.t, s)
	e.t.Cleanup(func() { _ = s.Close() })
	return s
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
				<-s.Done()
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

// quiet fails if s delivers anything (or ends with an error) within
// quietPeriod.
func (e *env) quiet(s walimpls.Scanner) {
	t := e.t
	t.Helper()
	select {
	case m, ok := <-s.Chan():
		if ok {
			require.FailNowf(t, "unexpected message", "scanner delivered %s (payload %q) when nothing more was due", m.ID(), clip(m.Payload()))
		}
		<-s.Done()
		require.FailNowf(t, "scanner ended", "scanner ended while idle: %v", s.Error())
	case <-time.After(quietPeriod):
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

// checkIDs checks that got holds exactly the messages of want, in order.
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
func (e *env) expectGone(w walimpls.WALImpl, p walimpls.DeliverPolicy) {
	e.t.Helper()
	s, err := w.Read(e.ctx, walimpls.ReadOption{Name: "gone", DeliverPolicy: p})
	if err != nil {
		require.ErrorIsf(e.t, err, walimpls.ErrPositionGone, "read %s", p)
		return
	}
	defer func() { _ = s.Close() }()
	select {
	case m, ok := <-s.Chan():
		require.Falsef(e.t, ok, "read %s below the truncation point delivered %s instead of ErrPositionGone", p, m.ID())
		<-s.Done()
		require.ErrorIsf(e.t, s.Error(), walimpls.ErrPositionGone, "read %s", p)
	case <-time.After(e.opts.waitTimeout):
		require.FailNowf(e.t, "watchdog", "read %s below the truncation point neither failed nor ended", p)
	}
}

// waitClosed waits for s's Chan and Done to close.
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
				require.FailNow(t, "Chan closed but Done did not")
			}
		case <-timer.C:
			require.FailNow(t, "scanner Chan did not close")
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
