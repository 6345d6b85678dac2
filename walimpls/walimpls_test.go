package walimpls_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/walimpls"
)

type namedBuilder string

func (b namedBuilder) Name() string { return string(b) }
func (namedBuilder) Build(context.Context, walimpls.BuildParams) (walimpls.Opener, error) {
	return nil, errors.New("not for building")
}

func TestRegistry(t *testing.T) {
	r := walimpls.NewRegistry()
	_, err := r.Lookup("local")
	require.ErrorIs(t, err, walimpls.ErrUnknownBackend)
	require.Contains(t, err.Error(), "registered: none")

	require.NoError(t, r.Register(namedBuilder("memory")))
	require.NoError(t, r.Register(namedBuilder("kafka")))
	require.Error(t, r.Register(namedBuilder("kafka")), "a name registered twice")
	require.Error(t, r.Register(namedBuilder("")), "an empty name")
	require.Error(t, r.Register(nil))

	b, err := r.Lookup("kafka")
	require.NoError(t, err)
	require.Equal(t, "kafka", b.Name())
	_, err = r.Lookup("pulsr")
	require.ErrorIs(t, err, walimpls.ErrUnknownBackend)
	require.Contains(t, err.Error(), `"pulsr" (registered: kafka, memory)`)
	require.Equal(t, []string{"kafka", "memory"}, r.Names())

	// Registries are values: another one knows nothing of the first.
	_, err = walimpls.NewRegistry().Lookup("kafka")
	require.ErrorIs(t, err, walimpls.ErrUnknownBackend)
}

func TestChannelValidate(t *testing.T) {
	require.NoError(t, walimpls.Channel{Name: "by-dev.rootcoord_dml_0", Term: 3}.Validate())
	require.NoError(t, walimpls.Channel{Name: "a", Mode: walimpls.ReadOnly}.Validate())
	for _, ch := range []walimpls.Channel{
		{Name: ""}, {Name: "."}, {Name: ".."}, {Name: "a b"}, {Name: "ä"}, {Name: "a/b"},
		{Name: strings.Repeat("a", 129)}, {Name: "a", Term: -1}, {Name: "a", Mode: 3},
	} {
		err := ch.Validate()
		require.ErrorIsf(t, err, walimpls.ErrInvalidChannel, "%+v", ch)
	}
	require.Equal(t, "c@4(ro)", walimpls.Channel{Name: "c", Term: 4, Mode: walimpls.ReadOnly}.String())
}

func TestTypedErrors(t *testing.T) {
	var err error = &walimpls.FencedError{Channel: "c", Term: 1, CurrentTerm: 2}
	wrapped := errors.Wrap(err, "append")
	require.ErrorIs(t, wrapped, walimpls.ErrFenced)
	var fe *walimpls.FencedError
	require.True(t, errors.As(wrapped, &fe))
	require.EqualValues(t, 2, fe.CurrentTerm)
	require.Contains(t, wrapped.Error(), `channel "c": term 1 fenced by term 2`)
	same := &walimpls.FencedError{Channel: "c", Term: 3, CurrentTerm: 3}
	require.Contains(t, same.Error(), "fenced by a later open of the same term")

	tl := errors.Wrap(&walimpls.TooLargeError{Size: 10, Limit: 5}, "append")
	require.ErrorIs(t, tl, walimpls.ErrTooLarge)
	require.Contains(t, tl.Error(), "limit of 5 bytes")
}

func TestIsRetryable(t *testing.T) {
	require.False(t, walimpls.IsRetryable(nil))
	require.True(t, walimpls.IsRetryable(errors.New("connection reset")))
	for _, err := range []error{walimpls.ErrFenced, walimpls.ErrTooLarge, walimpls.ErrClosed, walimpls.ErrReadOnly,
		context.Canceled, context.DeadlineExceeded, &walimpls.FencedError{}} {
		require.Falsef(t, walimpls.IsRetryable(errors.Wrap(err, "x")), "%v", err)
	}
}

func TestNotStored(t *testing.T) {
	require.False(t, walimpls.NotStored(nil))
	require.False(t, walimpls.NotStored(errors.New("connection reset")), "an unmarked error leaves the outcome unknown")
	require.False(t, walimpls.NotStored(errors.Wrap(context.Canceled, "append")))
	require.False(t, walimpls.NotStored(&walimpls.FencedError{}), "a fence may race a write in flight")
	for _, err := range []error{walimpls.ErrTooLarge, walimpls.ErrReadOnly, walimpls.ErrInvalidChannel,
		walimpls.ErrInvalidPosition, walimpls.ErrInvalidConfig, &walimpls.TooLargeError{}} {
		require.Truef(t, walimpls.NotStored(errors.Wrap(err, "append")), "%v", err)
	}
	fenced := walimpls.MarkNotStored(&walimpls.FencedError{Channel: "c", Term: 1, CurrentTerm: 2})
	wrapped := errors.Wrap(fenced, "adaptor: append")
	require.True(t, walimpls.NotStored(wrapped), "the mark survives wrapping")
	require.ErrorIs(t, wrapped, walimpls.ErrFenced, "marking keeps the sentinel")
	var fe *walimpls.FencedError
	require.True(t, errors.As(wrapped, &fe), "marking keeps the typed error")
	require.False(t, walimpls.NotStored(walimpls.MarkOutcomeUnknown(wrapped)), "unknown wins over not stored")
	require.False(t, walimpls.NotStored(walimpls.MarkOutcomeUnknown(errors.Wrap(walimpls.ErrTooLarge, "x"))))
	require.NoError(t, walimpls.MarkNotStored(nil))
	require.NoError(t, walimpls.MarkOutcomeUnknown(nil))

	// The marks add no text, and the sentinels and causes under them stay
	// visible to the standard errors.Is and cockroachdb's, through the
	// shapes the adaptor's retries give them (a cause and the last
	// attempt's error side by side).
	closed := errors.Wrap(walimpls.ErrClosed, "append to c")
	require.Equal(t, closed.Error(), walimpls.MarkNotStored(closed).Error())
	for name, err := range map[string]error{
		"marked":  walimpls.MarkNotStored(closed),
		"wrapped": errors.Wrap(walimpls.MarkNotStored(closed), "adaptor"),
		"retries": walimpls.MarkNotStored(fmt.Errorf("after 3 attempts: %w (last attempt: %w)", context.Canceled, walimpls.MarkNotStored(closed))),
		"joined":  errors.Join(errors.New("close"), walimpls.MarkNotStored(closed)),
	} {
		require.Truef(t, walimpls.NotStored(err), "%s: %v", name, err)
		errmarktest.Is(t, err, walimpls.ErrClosed)
	}
	unknown := fmt.Errorf("after 2 attempts: %w (last attempt: %w)", context.Canceled, walimpls.MarkNotStored(closed))
	require.False(t, walimpls.NotStored(walimpls.MarkOutcomeUnknown(unknown)), "unknown wins over a NotStored attempt under it")
	errmarktest.Is(t, walimpls.MarkOutcomeUnknown(unknown), walimpls.ErrClosed, context.Canceled)
}
