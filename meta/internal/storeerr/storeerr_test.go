package storeerr

import (
	"context"
	stderrors "errors"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
)

func TestMarkMatchesMarksAndCause(t *testing.T) {
	cause := errors.Wrap(context.DeadlineExceeded, "etcdstore: get \"k\"")
	err := Mark(cause, meta.ErrUnavailable, meta.ErrClosed)
	require.Equal(t, cause.Error(), err.Error(), "the marks add no text")
	for _, target := range []error{meta.ErrUnavailable, meta.ErrClosed, context.DeadlineExceeded} {
		require.True(t, stderrors.Is(err, target), "the standard errors.Is matches %v", target)
		require.True(t, errors.Is(err, target), "cockroachdb errors.Is matches %v", target)
	}
	require.False(t, errors.Is(err, meta.ErrCorrupt))
	require.False(t, stderrors.Is(err, meta.ErrCorrupt))
	// A layer that wraps it keeps the marks.
	require.ErrorIs(t, errors.Wrap(err, "pool"), meta.ErrUnavailable)
}

func TestConflict(t *testing.T) {
	for _, c := range []struct {
		expect, actual int64
		want           string
	}{
		{meta.Absent, 7, `boltstore: put "k": expected absent, found revision 7: meta: revision conflict`},
		{3, meta.Absent, `boltstore: put "k": expected revision 3, found absent: meta: revision conflict`},
		{meta.Any, 4, `boltstore: put "k": expected any, found revision 4: meta: revision conflict`},
	} {
		err := Conflict("boltstore", "put", "k", c.expect, c.actual)
		require.ErrorIs(t, err, meta.ErrConflict)
		require.EqualError(t, err, c.want)
	}
}
