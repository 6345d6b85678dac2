package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/cockroachdb/errors"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/internal/storeerr"
)

// ErrLocked means another opener holds the file: Open gave up after
// Options.Timeout. Errors matching it match meta.ErrUnavailable too, and
// keep bbolt's timeout error as their cause.
var ErrLocked = errors.New("boltstore: file locked by another opener")

// Store is a meta.Store on one bbolt file. Safe for concurrent use.
type Store struct {
	path string

	// mu guards closed and db's lifetime: every call holds it for reading
	// while it uses db; Close takes it for writing, so it waits for calls
	// in flight and later calls see closed.
	mu     sync.RWMutex
	closed bool
	db     *bolt.DB
}

var _ meta.Store = (*Store)(nil)

// Open opens the store in the file at path, creating it (and initialising
// an empty bbolt file) if needed. It fails with ErrLocked if another opener
// holds the file longer than opts.Timeout, and with meta.ErrCorrupt if the
// file is not a store (see doc.go).
func Open(path string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, storeerr.Mark(err, meta.ErrInvalid)
	}
	opts = opts.withDefaults()
	var db *bolt.DB
	err := guard(func() (err error) {
		db, err = bolt.Open(path, opts.Mode, &bolt.Options{Timeout: opts.Timeout})
		return err
	})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		err = errors.Wrapf(err, "boltstore: open %s: still locked by another opener after %s", path, opts.Timeout)
		return nil, storeerr.Mark(err, ErrLocked, meta.ErrUnavailable)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch),
		errors.Is(err, bolterrors.ErrChecksum), errors.Is(err, bolterrors.ErrInvalidMapping):
		return nil, storeerr.Mark(errors.Wrapf(err, "boltstore: open %s", path), meta.ErrCorrupt)
	case err != nil:
		return nil, errors.Wrapf(err, "boltstore: open %s", path)
	}
	if err := guard(func() error { return db.Update(initialise) }); err != nil {
		_ = db.Close()
		return nil, errors.Wrapf(err, "boltstore: open %s", path)
	}
	return &Store{path: path, db: db}, nil
}

// initialise checks the layout of the file, creating it in an empty file.
func initialise(tx *bolt.Tx) error {
	mb := tx.Bucket(bucketMeta)
	if mb == nil {
		var foreign []byte
		_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			foreign = bytes.Clone(name)
			return errStop
		})
		if foreign != nil {
			return storeerr.Mark(errors.Newf("not a meta store: bucket %q but no %q", foreign, bucketMeta), meta.ErrCorrupt)
		}
		mb, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := mb.Put(keyFormat, []byte{formatVersion}); err != nil {
			return err
		}
		if err := mb.Put(keyRev, encodeRev(0)); err != nil {
			return err
		}
		_, err = tx.CreateBucket(bucketKV)
		return err
	}
	if f := mb.Get(keyFormat); len(f) != 1 || f[0] != formatVersion {
		return storeerr.Mark(errors.Newf("format %x (this streamwal reads %d)", f, formatVersion), meta.ErrCorrupt)
	}
	if _, err := decodeRev(mb.Get(keyRev)); err != nil {
		return err
	}
	if tx.Bucket(bucketKV) == nil {
		return storeerr.Mark(errors.Newf("no bucket %q", bucketKV), meta.ErrCorrupt)
	}
	return nil
}

var errStop = errors.New("stop")

// Path is the file the store is in.
func (s *Store) Path() string { return s.path }

// begin starts a call: it fails with ErrClosed after Close and with the
// context's error when ctx is done. On success the caller must call
// s.mu.RUnlock when done with db.
func (s *Store) begin(ctx context.Context, op string) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errors.Wrapf(meta.ErrClosed, "boltstore: %s", op)
	}
	if err := ctx.Err(); err != nil {
		s.mu.RUnlock()
		return errors.Wrapf(err, "boltstore: %s", op)
	}
	return nil
}

// guard runs fn, turning a panic inside bbolt (a damaged page) into
// meta.ErrCorrupt, whose cause is the panic's value when that is an error
// (a runtime error). bbolt rolls the transaction back before the panic
// reaches here.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			const why = "boltstore: bbolt panicked, the file is damaged"
			cause, ok := r.(error)
			if ok {
				cause = errors.Wrap(cause, why)
			} else {
				cause = errors.Newf(why+": %v", r)
			}
			err = storeerr.Mark(cause, meta.ErrCorrupt)
		}
	}()
	return fn()
}

// view runs fn in a read-only transaction with the buckets and the store
// revision.
func (s *Store) view(fn func(kv *bolt.Bucket, rev int64) error) error {
	return guard(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			kv, rev, err := buckets(tx)
			if err != nil {
				return err
			}
			return fn(kv, rev)
		})
	})
}

// update runs fn in a read-write transaction. fn gets the store revision
// and returns the keys it wants written at the next one: put records and
// deletes; update writes them and the new store revision, and returns the
// revision the write took (the current one when there was nothing to
// change).
func (s *Store) update(fn func(kv *bolt.Bucket, rev int64) (writes, error)) (int64, error) {
	var out int64
	err := guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			kv, rev, err := buckets(tx)
			if err != nil {
				return err
			}
			w, err := fn(kv, rev)
			if err != nil {
				return err
			}
			out = rev
			if !w.changes(kv) {
				return nil
			}
			next := rev + 1
			for _, p := range w.puts {
				if err := kv.Put(p.key, encodeRecord(p.key, p.value, next)); err != nil {
					return err
				}
			}
			for _, d := range w.deletes {
				if err := kv.Delete(d); err != nil {
					return err
				}
			}
			if err := tx.Bucket(bucketMeta).Put(keyRev, encodeRev(next)); err != nil {
				return err
			}
			out = next
			return nil
		})
	})
	return out, err
}

// writes is what a write transaction changes.
type writes struct {
	puts    []put
	deletes [][]byte
}

type put struct{ key, value []byte }

// changes reports whether applying w changes the store: any put does, a
// delete only of a key that exists.
func (w writes) changes(kv *bolt.Bucket) bool {
	if len(w.puts) > 0 {
		return true
	}
	for _, d := range w.deletes {
		if kv.Get(d) != nil {
			return true
		}
	}
	return false
}

// buckets returns the kv bucket and the store revision of tx.
func buckets(tx *bolt.Tx) (*bolt.Bucket, int64, error) {
	mb, kv := tx.Bucket(bucketMeta), tx.Bucket(bucketKV)
	if mb == nil || kv == nil {
		return nil, 0, storeerr.Mark(errors.New("boltstore: buckets missing"), meta.ErrCorrupt)
	}
	rev, err := decodeRev(mb.Get(keyRev))
	return kv, rev, err
}

// current returns the revision of key (0 if absent), checking its record.
func current(kv *bolt.Bucket, key []byte, storeRev int64) (int64, error) {
	b := kv.Get(key)
	if b == nil {
		return meta.Absent, nil
	}
	rev, _, err := decodeRecord(key, b, storeRev)
	return rev, err
}

// Get returns key's value and revision, or meta.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (meta.KV, error) {
	op := fmt.Sprintf("get %q", key)
	if err := s.begin(ctx, op); err != nil {
		return meta.KV{}, err
	}
	defer s.mu.RUnlock()
	if err := meta.ValidateKey(key); err != nil {
		return meta.KV{}, errors.Wrap(err, "boltstore: get")
	}
	out := meta.KV{Key: key}
	err := s.view(func(kv *bolt.Bucket, storeRev int64) error {
		b := kv.Get([]byte(key))
		if b == nil {
			return errors.Wrapf(meta.ErrNotFound, "boltstore: get %q", key)
		}
		rev, value, err := decodeRecord([]byte(key), b, storeRev)
		if err != nil {
			return err
		}
		out.Value, out.Revision = bytes.Clone(value), rev
		return nil
	})
	if err != nil {
		return meta.KV{}, err
	}
	return out, nil
}

// List returns every key with prefix, in byte order, from one read-only
// transaction, and the store revision of that transaction.
func (s *Store) List(ctx context.Context, prefix string) ([]meta.KV, int64, error) {
	if err := s.begin(ctx, fmt.Sprintf("list %q", prefix)); err != nil {
		return nil, 0, err
	}
	defer s.mu.RUnlock()
	var (
		out []meta.KV
		at  int64
	)
	p := []byte(prefix)
	err := s.view(func(kv *bolt.Bucket, storeRev int64) error {
		at = storeRev
		c := kv.Cursor()
		for k, b := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, b = c.Next() {
			rev, value, err := decodeRecord(k, b, storeRev)
			if err != nil {
				return err
			}
			out = append(out, meta.KV{Key: string(k), Value: bytes.Clone(value), Revision: rev})
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, at, nil
}

// Put writes key if its revision is expect and returns the new revision.
func (s *Store) Put(ctx context.Context, key string, value []byte, expect int64) (int64, error) {
	if err := s.begin(ctx, fmt.Sprintf("put %q", key)); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	if err := errors.CombineErrors(meta.ValidateKey(key), meta.ValidateExpect(expect)); err != nil {
		return 0, errors.Wrap(err, "boltstore: put")
	}
	k := []byte(key)
	return s.update(func(kv *bolt.Bucket, storeRev int64) (writes, error) {
		if expect != meta.Any {
			rev, err := current(kv, k, storeRev)
			if err != nil {
				return writes{}, err
			}
			if rev != expect {
				return writes{}, storeerr.Conflict("boltstore", "put", key, expect, rev)
			}
		}
		return writes{puts: []put{{k, value}}}, nil
	})
}

// Delete removes key if its revision is expect.
func (s *Store) Delete(ctx context.Context, key string, expect int64) error {
	if err := s.begin(ctx, fmt.Sprintf("delete %q", key)); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := errors.CombineErrors(meta.ValidateKey(key), meta.ValidateExpect(expect)); err != nil {
		return errors.Wrap(err, "boltstore: delete")
	}
	k := []byte(key)
	_, err := s.update(func(kv *bolt.Bucket, storeRev int64) (writes, error) {
		if expect != meta.Any {
			rev, err := current(kv, k, storeRev)
			if err != nil {
				return writes{}, err
			}
			if rev != expect {
				return writes{}, storeerr.Conflict("boltstore", "delete", key, expect, rev)
			}
		}
		return writes{deletes: [][]byte{k}}, nil
	})
	return err
}

// Commit applies txn in one write transaction: every condition is checked
// before anything is written.
func (s *Store) Commit(ctx context.Context, txn meta.Txn) (int64, error) {
	if err := s.begin(ctx, "commit"); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	if err := txn.Validate(); err != nil {
		return 0, errors.Wrap(err, "boltstore: commit")
	}
	return s.update(func(kv *bolt.Bucket, storeRev int64) (writes, error) {
		for _, c := range txn.Conds {
			rev, err := current(kv, []byte(c.Key), storeRev)
			if err != nil {
				return writes{}, err
			}
			if rev != c.Revision {
				return writes{}, storeerr.Conflict("boltstore", "commit: condition on", c.Key, c.Revision, rev)
			}
		}
		var w writes
		for _, p := range txn.Puts {
			w.puts = append(w.puts, put{[]byte(p.Key), p.Value})
		}
		for _, d := range txn.Deletes {
			w.deletes = append(w.deletes, []byte(d))
		}
		return w, nil
	})
}

// Close waits for the calls in flight and closes the file, releasing its
// lock. Later calls fail with meta.ErrClosed. Idempotent: only the first
// call reports bbolt's error.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return errors.Wrapf(err, "boltstore: close %s", s.path)
	}
	return nil
}
