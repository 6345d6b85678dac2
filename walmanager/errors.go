package walmanager

import (
	"fmt"

	"github.com/cockroachdb/errors"
)

// Sentinel errors; callers check them with errors.Is. The manager wraps them
// with the channel and terms involved.
var (
	// ErrStaleTerm refuses a request older than the channel's expected
	// state: it changed nothing.
	ErrStaleTerm = errors.New("stale term")
	// ErrSuperseded is returned to an Open whose state was overtaken by a
	// newer request before it was reached.
	ErrSuperseded = errors.New("superseded by a newer request")
	// ErrTermMismatch is returned by GetAvailableWAL when the channel is
	// owned at another term than the one asked for.
	ErrTermMismatch = errors.New("term mismatch")
	// ErrChannelNotAvailable is returned by GetAvailableWAL for a channel
	// that is unknown, opening, failed, fenced or removed.
	ErrChannelNotAvailable = errors.New("channel not available")
	// ErrManagerClosed is returned by every call after Close, and to every
	// caller still waiting when Close starts.
	ErrManagerClosed = errors.New("wal manager closed")
	// ErrNotOwner is returned by Close of a WAL handed out by
	// GetAvailableWAL: only the manager ends the lifetimes it tracks.
	ErrNotOwner = errors.New("wal is owned by the manager")
	// ErrNoDeleter is returned by Delete of a manager built without
	// Options.Deleter.
	ErrNoDeleter = errors.New("wal manager has no channel deleter")
	// ErrCloseAbandoned records a WAL Close that did not return within the
	// grace period; the manager moved on without it.
	ErrCloseAbandoned = errors.New("wal close abandoned after the grace period")
)

// errWALUnavailable is the reason recorded when a WAL's Available channel
// closes and the WAL does not say why.
var errWALUnavailable = errors.New("wal became unavailable (fenced by a higher term or closed by its backend)")

// notAvailable is an ErrChannelNotAvailable error caused by cause: both
// errors.Is(err, ErrChannelNotAvailable) and errors.Is(err, cause) hold, with
// the standard library's errors.Is too (which does not know cockroachdb
// marks).
func notAvailable(cause error, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %w", fmt.Sprintf(format, args...), ErrChannelNotAvailable, cause)
}
