package errmark

import (
	"context"
	stderrors "errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

var (
	errA = errors.New("a")
	errB = stderrors.New("b")
	errC = errors.New("c")
)

func TestMarkMatchesMarksAndCause(t *testing.T) {
	cause := errors.Wrap(context.DeadlineExceeded, "get \"k\"")
	err := Mark(cause, errA, errB)
	require.Equal(t, cause.Error(), err.Error(), "the marks add no text")
	for _, target := range []error{errA, errB, context.DeadlineExceeded} {
		require.True(t, stderrors.Is(err, target), "the standard errors.Is matches %v", target)
		require.True(t, errors.Is(err, target), "cockroachdb errors.Is matches %v", target)
	}
	require.False(t, stderrors.Is(err, errC))
	require.False(t, errors.Is(err, errC))
	// Layers that wrap it, each way, keep the marks and the cause.
	for _, wrapped := range []error{
		errors.Wrap(err, "pool"),
		errors.WithStack(err),
		fmt.Errorf("pool: %w", err),
		fmt.Errorf("%w (last attempt: %w)", context.Canceled, err),
		errors.Join(errC, err),
		Mark(err, errC),
	} {
		for _, target := range []error{errA, errB, context.DeadlineExceeded} {
			require.True(t, stderrors.Is(wrapped, target), "std: %v in %q", target, wrapped)
			require.True(t, errors.Is(wrapped, target), "cockroachdb: %v in %q", target, wrapped)
		}
	}
	// The cause's type stays reachable, and its stack in %+v.
	var ce interface{ Cause() error }
	require.True(t, errors.As(err, &ce), "errors.As reaches the cause's wrapper")
	require.Contains(t, fmt.Sprintf("%+v", err), "TestMarkMatchesMarksAndCause", "the cause's stack shows")
}

func TestMarkNil(t *testing.T) {
	require.NoError(t, Mark(nil, errA))
}
