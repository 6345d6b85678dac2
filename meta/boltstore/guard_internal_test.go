package boltstore

import (
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
)

// TestGuardKeepsThePanicsError: a panic inside bbolt is meta.ErrCorrupt,
// and a panic with an error (a runtime error) keeps it as the cause.
func TestGuardKeepsThePanicsError(t *testing.T) {
	cause := errors.New("index out of range")
	err := guard(func() error { panic(cause) })
	require.ErrorIs(t, err, meta.ErrCorrupt)
	require.ErrorIs(t, err, cause)
	require.EqualError(t, err, "boltstore: bbolt panicked, the file is damaged: index out of range")

	err = guard(func() error { panic("page 7 already freed") })
	require.ErrorIs(t, err, meta.ErrCorrupt)
	require.EqualError(t, err, "boltstore: bbolt panicked, the file is damaged: page 7 already freed")

	require.NoError(t, guard(func() error { return nil }))
}
