package main

import (
	"context"
	stderrors "errors"
	"io"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// TestWaitKeepsTheDeadlineAndTheLastError: a wait that runs out of time
// fails with an error that names the last attempt's error and matches it
// as well as context.DeadlineExceeded, with retries and without.
func TestWaitKeepsTheDeadlineAndTheLastError(t *testing.T) {
	refused := errors.New("connection refused")
	c := &connector{timeout: 150 * time.Millisecond, errOut: io.Discard}

	err := c.wait(context.Background(), "kafka at 127.0.0.1:1", "answer", true, func(context.Context) error { return refused })
	require.EqualError(t, err, "kafka at 127.0.0.1:1 did not answer within 150ms (-connect-timeout): context deadline exceeded (last attempt: connection refused)")
	for _, target := range []error{context.DeadlineExceeded, refused} {
		require.True(t, errors.Is(err, target), "cockroachdb errors.Is matches %v", target)
		require.True(t, stderrors.Is(err, target), "the standard errors.Is matches %v", target)
	}

	err = c.wait(context.Background(), "pulsar at pulsar://127.0.0.1:1", "open 4 channels", false, func(ctx context.Context) error {
		<-ctx.Done()
		return errors.Wrap(refused, "open")
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, refused)
	require.Contains(t, err.Error(), "did not open 4 channels within 150ms (-connect-timeout)")
}
