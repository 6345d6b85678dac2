package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

func open(t *testing.T, c *memory.Cluster, name string, term int64) walimpls.WALImpl {
	t.Helper()
	o, err := memory.New(context.Background(), memory.Config{Cluster: c})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	w, err := o.Open(context.Background(), walimpls.Channel{Name: name, Term: term})
	require.NoError(t, err)
	return w
}

func TestFailNextAppendsIsRetryable(t *testing.T) {
	c := memory.NewCluster()
	w := open(t, c, "ch", 1)
	c.FailNextAppends(2)
	ctx := context.Background()
	for range 2 {
		_, err := walimpls.Append(ctx, w, message.Message{})
		require.ErrorIs(t, err, memory.ErrInjected)
		require.True(t, walimpls.IsRetryable(err))
	}
	id, err := walimpls.Append(ctx, w, message.Message{})
	require.NoError(t, err)
	require.Equal(t, "0", id.Marshal(), "failed appends store nothing")
}

func TestAppendLatencyHonoursContext(t *testing.T) {
	c := memory.NewCluster()
	w := open(t, c, "ch", 1)
	c.SetAppendLatency(time.Hour)
	// An hour's latency: an append that returns at all honoured its
	// context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := walimpls.Append(ctx, w, message.Message{})
		res <- err
	}()
	select {
	case err := <-res:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "watchdog: the append waits out the latency despite its context")
	}
	require.Zero(t, c.WaitingAppends())

	// Close also releases an append waiting out the latency.
	done := make(chan error, 1)
	go func() {
		_, err := walimpls.Append(context.Background(), w, message.Message{})
		done <- err
	}()
	require.Eventually(t, func() bool { return c.WaitingAppends() == 1 }, 10*time.Second, time.Millisecond,
		"the append waits out the latency")
	require.NoError(t, w.Close())
	require.ErrorIs(t, <-done, walimpls.ErrClosed)
	require.Zero(t, c.WaitingAppends())
}

func TestFencingSwitch(t *testing.T) {
	c := memory.NewCluster()
	c.SetFencing(false)
	old := open(t, c, "ch", 1)
	newer := open(t, c, "ch", 2)
	ctx := context.Background()
	_, err := walimpls.Append(ctx, old, message.Message{})
	require.NoError(t, err, "with fencing off a lower term keeps writing")
	_, err = walimpls.Append(ctx, newer, message.Message{})
	require.NoError(t, err)
	lower := open(t, c, "ch", 1)
	require.NotNil(t, lower, "with fencing off a lower term may open")

	c.SetFencing(true)
	_, err = walimpls.Append(ctx, old, message.Message{})
	var fe *walimpls.FencedError
	require.True(t, errors.As(err, &fe))
	require.EqualValues(t, 2, fe.CurrentTerm)
}

func TestBuilder(t *testing.T) {
	c := memory.NewCluster()
	b := memory.NewBuilder(c)
	require.Equal(t, "memory", b.Name())
	o, err := b.Build(context.Background(), walimpls.BuildParams{Config: func(into any) error {
		into.(*memory.Config).MaxMessageBytes = 10
		return nil
	}})
	require.NoError(t, err)
	require.Equal(t, 10, o.Capabilities().MaxMessageBytes)
	require.NoError(t, o.Close())

	_, err = b.Build(context.Background(), walimpls.BuildParams{Config: func(into any) error {
		into.(*memory.Config).MaxMessageBytes = -1
		return nil
	}})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	_, err = b.Build(context.Background(), walimpls.BuildParams{Config: func(any) error { return errors.New("yaml: bad") }})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = memory.New(ctx, memory.Config{})
	require.ErrorIs(t, err, context.Canceled)
	_, err = memory.New(context.Background(), memory.Config{MaxMessageBytes: -1})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
}
