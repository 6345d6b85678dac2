package local

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

var (
	// ErrLocked means another process (or another Store of this process)
	// holds the root directory. The error names the holder's pid.
	ErrLocked = errors.New("local wal root is locked")
	// ErrJournalFailed marks every error of a store whose journal failed a
	// write or a sync: nothing is acknowledged after such a failure; close
	// the store and open it again (recovery then decides what was written).
	ErrJournalFailed = errors.New("local wal journal failed")
	// ErrCorrupt means Open found damage that is not a torn tail: a bad
	// frame in the middle of the log, a missing segment (every segment
	// file of a root that wrote some, among others), or sequence numbers
	// out of order. Nothing is skipped silently.
	ErrCorrupt = errors.New("local wal corrupt")
	// ErrDiskFull refuses an append while the free space of the root's
	// file system is below Config.DiskHardFreeBytes (doc.go, Disk space).
	// Nothing was framed: the error is marked walimpls.MarkNotStored, and
	// walimpls.IsRetryable holds, because truncation and deletion free
	// space and appends then pass again. Opens, truncations, deletes and
	// reads are never refused for it.
	ErrDiskFull = errors.New("local wal disk full")
)

// journalError is the sticky error of a failed journal: it matches
// ErrJournalFailed and unwraps to the write or sync error that caused it.
type journalError struct {
	dir   string
	cause error
}

func (e *journalError) Error() string {
	return fmt.Sprintf("local: journal %s failed, no later append is acknowledged: %v", e.dir, e.cause)
}

func (e *journalError) Unwrap() error { return e.cause }

// Is makes errors.Is(err, ErrJournalFailed) hold, and
// errors.Is(err, walimpls.ErrUnrecoverable) so that nobody retries.
func (e *journalError) Is(target error) bool {
	return target == ErrJournalFailed || target == walimpls.ErrUnrecoverable
}
