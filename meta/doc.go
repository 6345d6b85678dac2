// Package meta is where streamwal keeps its control data: the channel pool,
// vchannel allocations and checkpoints. It defines a small key-value store
// contract with compare-and-set on revisions, and two implementations:
// meta/boltstore, embedded in a node's data directory on go.etcd.io/bbolt
// (the default), and meta/etcdstore on an etcd cluster, for several nodes.
// meta/metatest is the suite both pass: what "a store works" means.
//
// # Model
//
// A store holds keys (non-empty strings of at most MaxKeyLen bytes) with
// byte values. Every write gets a revision from one counter of the store
// that only grows: KV.Revision is the revision of the last write of the
// key, like etcd's ModRevision. A key that does not exist has revision 0.
//
// Writes are conditional. Put and Delete take the revision the caller
// expects the key to have: Absent (0) means "the key must not exist",
// a positive revision means "the key must still be at this revision", and
// Any means unconditional. A write whose expectation does not hold fails
// with an error matching ErrConflict and changes nothing; the caller reads
// again and decides again. Commit applies several puts and deletes
// atomically under several such conditions: all or nothing, at one new
// revision.
//
// # Promises
//
//   - A successful write is durable when it returns (bbolt: fdatasync;
//     etcd: committed by a quorum).
//   - Reads see every write that returned before them (linearizable on
//     etcd, in process on bbolt).
//   - Values round-trip byte for byte; List returns keys in byte order.
//   - A write whose answer was lost (a dropped connection) may have been
//     applied; because every write is conditional, retrying after a fresh
//     read never applies a decision twice.
//   - Bad input (an empty or too long key, a negative expectation other than
//     Any, too many operations in one Commit) is ErrInvalid; every call after
//     Close is ErrClosed; an unreachable store is ErrUnavailable after the
//     call's context or the store's timeout. Nothing panics.
package meta
