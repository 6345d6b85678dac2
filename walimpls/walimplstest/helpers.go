package walimplstest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
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

// AppendMany appends n messages, "tag-0" to "tag-<n-1>", one after the
// other (each append starts once the last was acknowledged), and returns
// their IDs.
func AppendMany(t testing.TB, w walimpls.WALImpl, tag string, n int) []message.ID {
	t.Helper()
	ids := make([]message.ID, n)
	for i := range ids {
		ids[i] = AppendOK(t, w, Message(t, fmt.Sprintf("%s-%d", tag, i), nil))
	}
	return ids
}

// ReadUntil reads a fresh scanner of p up to and including the message
// last, which it must reach within timeout without passing it, and returns
// what it delivered.
func ReadUntil(t testing.TB, w walimpls.WALImpl, p cursor.Policy, last message.ID, timeout time.Duration) []message.Immutable {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: t.Name(), DeliverPolicy: p})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	var got []message.Immutable
	for {
		select {
		case m, ok := <-s.Chan():
			require.True(t, ok, "scanner ended after %d messages: %v", len(got), s.Error())
			got = append(got, m)
			if m.ID().EQ(last) {
				return got
			}
			require.True(t, m.ID().LT(last), "delivered %s, beyond the last message %s", m.ID(), last)
		case <-ctx.Done():
			require.FailNow(t, "timeout", "%s: %d messages read, %s not reached", p, len(got), last)
		}
	}
}

// RequireSuffix checks that got is the end of ids, message for message.
func RequireSuffix(t testing.TB, ids []message.ID, got []message.Immutable) {
	t.Helper()
	require.LessOrEqual(t, len(got), len(ids))
	want := ids[len(ids)-len(got):]
	for i, m := range got {
		require.True(t, want[i].EQ(m.ID()), "message %d of the tail: want %s, got %s", i, want[i], m.ID())
	}
}

// ReadN reads n messages from a fresh scanner, which it closes.
func ReadN(t testing.TB, w walimpls.WALImpl, p cursor.Policy, n int, timeout time.Duration) []message.Immutable {
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

// BuiltCluster is a Cluster over one backend's configuration: every
// NewOpener is another node, built through the registry path (Builder's
// Build, its configuration section decoded into Config) with Logger, as
// a node built from a configuration file is.
type BuiltCluster[C any] struct {
	Builder walimpls.Builder
	Config  C
	Logger  *slog.Logger
}

// NewOpener implements Cluster.
func (c BuiltCluster[C]) NewOpener(t *testing.T) walimpls.Opener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	o, err := c.Builder.Build(ctx, walimpls.BuildParams{Config: Decodes(c.Config), Logger: c.Logger})
	require.NoError(t, err)
	return o
}

// Decodes returns a ConfigDecoder whose section decodes to cfg: what a
// Builder receives for a configuration file whose section says cfg.
func Decodes[C any](cfg C) walimpls.ConfigDecoder {
	return func(into any) error {
		p, ok := into.(*C)
		if !ok {
			return fmt.Errorf("walimplstest: decode a %T into %T", cfg, into)
		}
		*p = cfg
		return nil
	}
}

// Split runs fn(n) on k goroutines that share total operations, and waits
// for them: the appenders of a benchmark (total b.N).
func Split(total, k int, fn func(n int)) {
	var wg sync.WaitGroup
	for g := range k {
		n := total / k
		if g < total%k {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(n)
		}()
	}
	wg.Wait()
}
