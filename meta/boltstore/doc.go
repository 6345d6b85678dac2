// Package boltstore is the embedded meta.Store, the default: one bbolt file
// in a node's data directory (go.etcd.io/bbolt). It is for a single process;
// several nodes share control data through meta/etcdstore instead.
//
// # Promises
//
// Beyond the meta.Store contract (and the metatest suite, which it passes):
//
//   - One opener at a time. Open takes bbolt's exclusive file lock; a second
//     opener of the same file, in this process or another, fails with an
//     error matching ErrLocked and meta.ErrUnavailable after
//     Options.Timeout (default 1s) instead of waiting for ever. The lock
//     dies with its process: after a crash (even kill -9) the next Open
//     succeeds and finds every write that returned.
//   - Every write is one bbolt read-write transaction: read the records,
//     compare the expected revisions, write, bump the store revision,
//     commit (two fdatasyncs). bbolt runs one write transaction at a time,
//     so compare-and-set needs no other lock. A write returns only once it
//     is on disk.
//   - Reads are read-only transactions: List is one snapshot, at the store
//     revision it returns. Values are copied out of the transaction.
//   - A damaged record is meta.ErrCorrupt naming its key; it never panics,
//     and an unconditional Put or Delete (meta.Any) of that key replaces
//     it. A file that is not a bbolt file, or a bbolt file of something
//     else, is refused by Open with meta.ErrCorrupt and left untouched.
//
// Calls do not wait for the caller's context once started (a bbolt
// transaction cannot be interrupted); a call whose context is already done
// returns the context's error and changes nothing.
//
// # File format
//
// A bbolt file (page checksums are bbolt's: it has none for data pages)
// holding exactly two buckets:
//
//	bucket "meta"
//	    "format" -> 1 byte: 0x01, the version of everything below
//	    "rev"    -> 8 bytes, big-endian uint64: the store revision, the
//	                revision of the last write (0: none yet)
//	bucket "kv"
//	    key      -> record
//
// A key of the store is the bucket key, byte for byte (1 to meta.MaxKeyLen
// bytes); bbolt keeps them in byte order, which is List's order. A record:
//
//	 0        1                 9                13
//	+--------+-----------------+----------------+---------------+
//	| 0x01   | revision        | CRC-32C        | value         |
//	| (kind) | uint64, BE      | uint32, BE     | 0..n bytes    |
//	+--------+-----------------+----------------+---------------+
//
// The revision is the store revision of the write that put the record. The
// CRC (Castagnoli) covers the kind byte, the revision, the key and the
// value, so a record copied under another key is caught too.
//
// Revisions: every write that changes something takes store revision + 1
// for all of its records and stores it in "rev" in the same transaction.
// Deletes remove records but the counter stays, so revisions are never
// reused, across reopens too. A write that changes nothing (deleting a key
// that does not exist) takes no revision.
//
// # Damage and recovery
//
// bbolt's own meta-page checksums and double meta pages make commits
// atomic: a crash leaves the last committed state (bbolt's README lists
// the known exceptions). What Open and the readers do with the rest:
//
//   - not a bbolt file, or a bbolt version mismatch: Open fails with
//     meta.ErrCorrupt (cause: bbolt's error); nothing is written.
//   - a bbolt file without bucket "meta" but with other buckets: not ours;
//     Open fails with meta.ErrCorrupt. An empty bbolt file (or a new one)
//     is initialised.
//   - an unknown format byte (a newer streamwal), a missing "kv" bucket, a
//     "rev" that is not 8 bytes: Open fails with meta.ErrCorrupt.
//   - a record that is too short, of an unknown kind, whose CRC does not
//     match, or whose revision is 0 or above the store revision:
//     meta.ErrCorrupt naming the key, from every call that reads it (Get,
//     List over it, Put, Delete or a Commit condition expecting a
//     revision). Put or Delete with meta.Any overwrites it without reading.
//   - a panic inside bbolt while reading a damaged page is recovered and
//     returned as meta.ErrCorrupt.
package boltstore
