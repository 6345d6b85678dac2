package walimplstest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Helpers for a backend's own tests beside the suite (fault, restart and
// regression tests). Every blocking step has a deadline, so a broken
// backend fails the test instead of hanging it. Slow peers (a broker over
// the wire) may need longer than the defaults: pass a longer timeout.

// DefaultTimeout bounds each helper step that takes no timeout.
const DefaultTimeout = 10 * time.Second

// Open opens a WAL that is closed at the end of the test.
func Open(t testing.TB, o walimpls.Opener, name string, term int64, mode walimpls.AccessMode, timeout time.Duration) walimpls.WALImpl {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w, err := o.Open(ctx, walimpls.Channel{Name: name, Term: term, Mode: mode})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// Message builds a message, failing the test on a reserved property key.
func Message(t testing.TB, payload string, props map[string]string) message.Message {
	t.Helper()
	m, err := message.New([]byte(payload), props)
	require.NoError(t, err)
	return m
}

// AppendOK appends m and returns its ID, failing the test on an error.
func AppendOK(t testing.TB, w walimpls.WALImpl, m message.Message) message.ID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	id, err := walimpls.Append(ctx, w, m)
	require.NoError(t, err)
	return id
}

// ReadN reads n messages from a fresh scanner, which it closes.
func ReadN(t testing.TB, w walimpls.WALImpl, p walimpls.DeliverPolicy, n int, timeout time.Duration) []message.Immutable {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: t.Name(), DeliverPolicy: p})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	return Collect(t, s, n, timeout)
}

// Collect takes n messages from s within d, failing the test if s ends or
// d passes first.
func Collect(t testing.TB, s walimpls.Scanner, n int, d time.Duration) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				require.FailNowf(t, "scanner ended", "after %d of %d messages: %v", len(out), n, s.Error())
			}
			out = append(out, m)
		case <-timeout.C:
			require.FailNowf(t, "timeout", "read %d of %d messages in %s", len(out), n, d)
		}
	}
	return out
}

// NothingMore fails the test if s delivers a message within d.
func NothingMore(t testing.TB, s walimpls.Scanner, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-s.Chan():
		if ok {
			require.FailNowf(t, "unexpected message", "%s: %q", m.ID(), m.Payload())
		}
	case <-time.After(d):
	}
}

// PlainOpener returns an opener whose WALs offer none of the optional
// interfaces (walimpls.BatchReader, walimpls.AsyncAppender), for a test or
// a benchmark of what a consumer does with a backend that offers none.
func PlainOpener(o walimpls.Opener) walimpls.Opener { return plainOpener{o} }

type plainOpener struct{ walimpls.Opener }

func (o plainOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	w, err := o.Opener.Open(ctx, ch)
	if err != nil {
		return nil, err
	}
	return struct{ walimpls.WALImpl }{w}, nil
}
