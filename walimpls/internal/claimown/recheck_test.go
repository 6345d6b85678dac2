package claimown

import (
	"context"
	stderrors "errors"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

func TestAfterFailedSend(t *testing.T) {
	cause := errors.New("producer fenced by the broker")

	t.Run("still wins", func(t *testing.T) {
		r, err := AfterFailedSend(cause, nil)
		require.Equal(t, StillWins, r)
		require.Same(t, cause, err)
	})

	t.Run("beaten", func(t *testing.T) {
		for _, check := range []error{
			&walimpls.FencedError{Channel: "c", Term: 3, CurrentTerm: 4},
			&walimpls.FencedError{Channel: "c", Term: 3, Deleted: true},
			errors.Wrap(&walimpls.FencedError{Channel: "c", Term: 3}, "claim check"),
		} {
			r, err := AfterFailedSend(cause, check)
			require.Equal(t, Beaten, r, "%v", check)
			require.Same(t, check, err, "the fence is the check's error, alone")
		}
	})

	t.Run("check failed", func(t *testing.T) {
		check := errors.Wrap(context.DeadlineExceeded, "read term claims")
		r, err := AfterFailedSend(cause, check)
		require.Equal(t, CheckFailed, r)
		require.EqualError(t, err, "producer fenced by the broker (claim check: read term claims: context deadline exceeded)")
		for _, target := range []error{cause, context.DeadlineExceeded} {
			require.True(t, errors.Is(err, target), "cockroachdb errors.Is matches %v", target)
			require.True(t, stderrors.Is(err, target), "the standard errors.Is matches %v", target)
		}
		require.False(t, errors.Is(err, walimpls.ErrFenced))
		// The backend's wrapping and marks keep both.
		wrapped := walimpls.MarkNotStored(errors.Wrapf(err, "kafka: append to channel %q", "c"))
		require.ErrorIs(t, wrapped, cause)
		require.ErrorIs(t, wrapped, context.DeadlineExceeded)
		require.True(t, walimpls.NotStored(wrapped))
	})
}
