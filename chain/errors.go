package chain

import "github.com/cockroachdb/errors"

// Sentinel errors, checked with errors.Is. A position in a pruned segment
// is walimpls.ErrPositionGone; a position string that does not parse is
// message.ErrCorruptID; a stored chain that cannot be read is
// meta.ErrCorrupt.
var (
	// ErrInvalid means a chain, segment, backend or request breaks a rule
	// of the format (see the package documentation). A stored chain that
	// does is meta.ErrCorrupt too.
	ErrInvalid = errors.New("chain: invalid")
	// ErrNotFound means the channel has no chain: it never moved, and is
	// the single segment it was created on.
	ErrNotFound = errors.New("chain: no chain for channel")
	// ErrExists means Create found a chain already.
	ErrExists = errors.New("chain: chain exists")
	// ErrSegmentMismatch means the chain's last segment is not the one the
	// caller decided on: another migration, seal or prune got there first.
	// Read the chain again and decide again.
	ErrSegmentMismatch = errors.New("chain: last segment mismatch")
	// ErrMigrationPending means another migration of the channel is
	// pending: finish it (Seal) or cancel it first.
	ErrMigrationPending = errors.New("chain: a migration is pending")
	// ErrNoMigration means no migration is pending: it was cancelled, or
	// never requested.
	ErrNoMigration = errors.New("chain: no migration pending")
	// ErrMigrationMismatch means the pending migration is not the one the
	// caller names (another term).
	ErrMigrationMismatch = errors.New("chain: pending migration mismatch")
	// ErrSameBackend means a migration targets the backend the channel is
	// already on.
	ErrSameBackend = errors.New("chain: target is the current backend")
	// ErrStaleTerm means a migration's term is not above the last
	// segment's first term: the term authority moved on.
	ErrStaleTerm = errors.New("chain: stale term")
	// ErrUnknownSegment means a position names a segment after the chain's
	// last: it belongs to another chain, or to a future the store has not
	// seen.
	ErrUnknownSegment = errors.New("chain: unknown segment")
	// ErrNewerFormat means the stored chain was written by a newer
	// streamwal in a format this one cannot read; it also matches
	// meta.ErrCorrupt. It is never rewritten.
	ErrNewerFormat = errors.New("chain: newer format")
)
