package meta

import (
	"context"

	"github.com/cockroachdb/errors"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrNotFound is returned by Get for a key that does not exist.
	ErrNotFound = errors.New("meta: key not found")
	// ErrConflict means a write's expected revision did not hold: another
	// writer got there first. Nothing was changed.
	ErrConflict = errors.New("meta: revision conflict")
	// ErrInvalid means bad input: an empty or too long key, an expectation
	// that is neither Absent, Any nor a revision, too many operations.
	ErrInvalid = errors.New("meta: invalid request")
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("meta: store closed")
	// ErrUnavailable means the store could not be reached in time.
	ErrUnavailable = errors.New("meta: store unavailable")
	// ErrCorrupt means a stored value cannot be decoded by its reader.
	ErrCorrupt = errors.New("meta: corrupt value")
)

const (
	// Absent as an expected revision means the key must not exist.
	Absent int64 = 0
	// Any as an expected revision makes a write unconditional.
	Any int64 = -1
)

// MaxKeyLen bounds keys, so that every store can hold them.
const MaxKeyLen = 1024

// MaxCommitOps bounds the puts and deletes of one Commit (etcd's default
// limit of 128 operations per transaction, leaving room for the
// conditions' reads).
const MaxCommitOps = 64

// KV is a key, its value and the revision of its last write.
type KV struct {
	Key      string
	Value    []byte
	Revision int64
}

// Cond is a condition of a Commit: Key must be at Revision (Absent: must not
// exist).
type Cond struct {
	Key      string
	Revision int64
}

// Txn is an atomic change: every condition holds and every put and delete
// is applied, or nothing is.
type Txn struct {
	Conds   []Cond
	Puts    []KV // Revision is ignored
	Deletes []string
}

// Store is a key-value store with compare-and-set on revisions. Safe for
// concurrent use.
type Store interface {
	// Get returns key's value and revision, or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// List returns every key with the prefix, in byte order, all read at one
	// revision, which it returns too (the store's revision at the read).
	List(ctx context.Context, prefix string) ([]KV, int64, error)
	// Put writes key if its revision is expect (Absent, a revision, or Any)
	// and returns the new revision; otherwise ErrConflict.
	Put(ctx context.Context, key string, value []byte, expect int64) (int64, error)
	// Delete removes key if its revision is expect (Absent, a revision, or
	// Any); otherwise ErrConflict. A key that does not exist is not an error
	// with Absent or Any: there is nothing to remove, and nothing changes
	// (no new revision).
	Delete(ctx context.Context, key string, expect int64) error
	// Commit applies txn atomically and returns the new revision, or
	// ErrConflict naming the first condition that failed.
	Commit(ctx context.Context, txn Txn) (int64, error)
	// Close releases the store; idempotent.
	Close() error
}

// ValidateKey reports an ErrInvalid error for a key no store may hold.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return errors.Wrap(ErrInvalid, "empty key")
	case len(key) > MaxKeyLen:
		return errors.Wrapf(ErrInvalid, "key of %d bytes exceeds %d", len(key), MaxKeyLen)
	}
	return nil
}

// ValidateExpect reports an ErrInvalid error for an expected revision that
// is neither Absent, Any nor a revision.
func ValidateExpect(expect int64) error {
	if expect < Any {
		return errors.Wrapf(ErrInvalid, "expected revision %d", expect)
	}
	return nil
}

// Validate reports an ErrInvalid error for a transaction no store may
// apply: too many operations, invalid keys or revisions, a key both put and
// deleted.
func (t Txn) Validate() error {
	if n := len(t.Puts) + len(t.Deletes); n == 0 || n > MaxCommitOps {
		return errors.Wrapf(ErrInvalid, "commit of %d operations (1 to %d)", n, MaxCommitOps)
	}
	if len(t.Conds) > MaxCommitOps {
		return errors.Wrapf(ErrInvalid, "commit of %d conditions (at most %d)", len(t.Conds), MaxCommitOps)
	}
	seen := map[string]bool{}
	for _, c := range t.Conds {
		if err := ValidateKey(c.Key); err != nil {
			return err
		}
		if c.Revision < 0 {
			return errors.Wrapf(ErrInvalid, "condition on %q: revision %d", c.Key, c.Revision)
		}
	}
	for _, p := range t.Puts {
		if err := ValidateKey(p.Key); err != nil {
			return err
		}
		if seen[p.Key] {
			return errors.Wrapf(ErrInvalid, "key %q written twice in one commit", p.Key)
		}
		seen[p.Key] = true
	}
	for _, d := range t.Deletes {
		if err := ValidateKey(d); err != nil {
			return err
		}
		if seen[d] {
			return errors.Wrapf(ErrInvalid, "key %q written twice in one commit", d)
		}
		seen[d] = true
	}
	return nil
}
