package pool

import "github.com/cockroachdb/errors"

// Sentinel errors, checked with errors.Is.
var (
	// ErrInvalidConfig means a Config does not validate.
	ErrInvalidConfig = errors.New("pool: invalid config")
	// ErrConfigMismatch means the stored pool has another prefix or backend
	// than the configuration: using it would strand its allocations.
	ErrConfigMismatch = errors.New("pool: config differs from the stored pool")
	// ErrShrink means the configured size is below the stored one.
	ErrShrink = errors.New("pool: a pool cannot shrink")
	// ErrInvalidVChannel means a vchannel name is not valid.
	ErrInvalidVChannel = errors.New("pool: invalid vchannel")
	// ErrBatchTooLarge means one call asked for more than MaxBatch vchannels.
	ErrBatchTooLarge = errors.New("pool: batch too large")
	// ErrNotAllocated means a vchannel has no pchannel.
	ErrNotAllocated = errors.New("pool: vchannel not allocated")
	// ErrUnknownPChannel means a pchannel is not in the pool.
	ErrUnknownPChannel = errors.New("pool: unknown pchannel")
	// ErrStaleTerm means a checkpoint save carries a lower term than the
	// stored checkpoint: a newer owner took over.
	ErrStaleTerm = errors.New("pool: checkpoint of a stale term")
	// ErrCheckpointBackwards means a checkpoint save of the same term is
	// before the stored one.
	ErrCheckpointBackwards = errors.New("pool: checkpoint moves backwards")
	// ErrCheckpointUnknown means a vchannel of a pchannel has no checkpoint
	// yet, so nothing may be pruned.
	ErrCheckpointUnknown = errors.New("pool: checkpoint unknown")
	// ErrNoVChannels means a pchannel has no vchannel, so no checkpoint
	// decides how far to prune it.
	ErrNoVChannels = errors.New("pool: pchannel has no vchannels")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("pool: closed")
)
