package pulsar

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// The batch bookkeeping, step by step: results arrive in any order, the
// outcome is always the leading stored messages and the first failure.

func bid(entry int64) msgID { return msgID{ledger: 7, entry: entry, batch: -1} }

func handOver(b *batch, n int) {
	for range n {
		b.handed()
	}
}

func TestBatchAllStored(t *testing.T) {
	b := newBatch(3)
	handOver(&b, 3)
	b.storedAt(2, bid(2))
	b.storedAt(0, bid(0))
	require.False(t, b.settled(), "a result is missing")
	b.storedAt(1, bid(1))
	require.True(t, b.settled())
	ids, err := b.outcome()
	require.NoError(t, err)
	require.Equal(t, []msgID{bid(0), bid(1), bid(2)}, ids)
}

func TestBatchNotSettledWhileUnsent(t *testing.T) {
	b := newBatch(3)
	handOver(&b, 2)
	b.storedAt(0, bid(0))
	b.storedAt(1, bid(1))
	require.False(t, b.settled(), "one message is still to hand over")
	require.Equal(t, 1, b.unsent())
	b.handed()
	require.Equal(t, 0, b.unsent())
	b.storedAt(2, bid(2))
	require.True(t, b.settled())
}

func TestBatchFailureCutsThePrefix(t *testing.T) {
	// A later message stored after an earlier one failed (a send timeout
	// whose message the broker never got, then a resend of the rest) is
	// not reported: only the leading stored messages are.
	timeout := errors.New("timeout")
	b := newBatch(4)
	handOver(&b, 4)
	b.storedAt(3, bid(9))
	b.failedAt(1, timeout)
	b.storedAt(0, bid(0))
	b.failedAt(2, errors.New("later"))
	ids, err := b.outcome()
	require.ErrorIs(t, err, timeout)
	require.Equal(t, []msgID{bid(0)}, ids)
}

func TestBatchLowestFailureWins(t *testing.T) {
	first, second := errors.New("first"), errors.New("second")
	b := newBatch(3)
	handOver(&b, 3)
	b.failedAt(2, second)
	b.failedAt(1, first)
	b.failedAt(0, first)
	ids, err := b.outcome()
	require.ErrorIs(t, err, first)
	require.Empty(t, ids)
}

func TestBatchStop(t *testing.T) {
	cut := errors.New("cut")
	b := newBatch(5)
	handOver(&b, 2)
	b.stop(cut)
	b.stop(errors.New("ignored: stop is idempotent"))
	require.Equal(t, 0, b.unsent())
	require.False(t, b.settled(), "two results are missing")
	b.storedAt(0, bid(0))
	b.storedAt(1, bid(1))
	ids, err := b.outcome()
	require.ErrorIs(t, err, cut, "everything handed over was stored: the rest was cut")
	require.Equal(t, []msgID{bid(0), bid(1)}, ids)

	// An earlier failure is the one reported.
	early := errors.New("early")
	b = newBatch(5)
	handOver(&b, 2)
	b.failedAt(1, early)
	b.stop(cut)
	b.storedAt(0, bid(0))
	ids, err = b.outcome()
	require.ErrorIs(t, err, early)
	require.Equal(t, []msgID{bid(0)}, ids)

	// Stopped with nothing in flight: settled at once.
	b = newBatch(2)
	b.stop(cut)
	require.True(t, b.settled())
	ids, err = b.outcome()
	require.ErrorIs(t, err, cut)
	require.Empty(t, ids)
}

func TestBatchAbandon(t *testing.T) {
	gone := errors.New("producer gone")
	b := newBatch(6)
	handOver(&b, 4)
	b.storedAt(0, bid(0))
	b.storedAt(2, bid(2))
	b.abandon(gone)
	require.True(t, b.settled())
	ids, err := b.outcome()
	require.ErrorIs(t, err, gone)
	require.Equal(t, []msgID{bid(0)}, ids, "message 1 had no result: the prefix ends before it")

	// Nothing in flight: abandon cuts the unsent rest.
	b = newBatch(3)
	handOver(&b, 1)
	b.storedAt(0, bid(0))
	b.abandon(gone)
	ids, err = b.outcome()
	require.ErrorIs(t, err, gone)
	require.Equal(t, []msgID{bid(0)}, ids)

	// Everything stored already: nothing to abandon.
	b = newBatch(1)
	handOver(&b, 1)
	b.storedAt(0, bid(0))
	b.abandon(gone)
	ids, err = b.outcome()
	require.NoError(t, err)
	require.Equal(t, []msgID{bid(0)}, ids)
}

func TestBatchImpossibleStates(t *testing.T) {
	b := newBatch(2)
	require.Panics(t, func() { b.storedAt(0, bid(0)) }, "a result for a message never handed over")
	handOver(&b, 1)
	b.storedAt(0, bid(0))
	require.Panics(t, func() { b.storedAt(0, bid(0)) }, "a second result")
	require.Panics(t, func() { _, _ = b.outcome() }, "outcome before the batch settled")
	b.stop(errors.New("cut"))
	require.Panics(t, b.handed, "a message handed over after stop")
}
