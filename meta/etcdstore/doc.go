// Package etcdstore is the meta.Store on an etcd cluster
// (go.etcd.io/etcd/client/v3), for streamwal nodes that share their control
// data. It passes the metatest suite, like meta/boltstore.
//
// The caller owns the client: New takes a *clientv3.Client (from Dial, or
// one the caller shares with leases, elections and watches) and Close never
// closes it.
//
// # Mapping onto etcd
//
// A store key k is the etcd key Options.Prefix + k; List and Get return k
// without the prefix. Revisions are etcd's: a KV's Revision is the key's
// ModRevision, a write returns the header revision of its transaction, and
// List returns the revision it read at. They are cluster-wide, so writes
// outside the prefix move them too; they still only grow. A key that does
// not exist has Version 0, which is what meta.Absent compares against.
//
//	Get(k)          Range k (linearizable)
//	List(p)         Range [P+p, end of prefix P+p), in pages of
//	                Options.ListPageSize keys, every page after the first
//	                at the first page's revision; if that revision is
//	                compacted away meanwhile, List starts over with one
//	                unpaged Range
//	Put(k, v, e)    Txn If(cmp(k, e)) Then(Put k v) Else(Range k, keys only)
//	Delete(k, e)    Txn If(cmp(k, e)) Then(Delete k) Else(Range k, keys only)
//	Commit(txn)     Txn If(cmp per condition) Then(puts, deletes)
//	                Else(Range of every condition's key, keys only)
//
// where cmp(k, Absent) is Version(k) = 0, cmp(k, r) is ModRevision(k) = r
// and meta.Any has no compare. The Else reads name the key and revision
// that broke a condition in the ErrConflict error, in the same round trip.
// meta.MaxCommitOps (64) puts and deletes plus at most 64 conditions stay
// within etcd's default limit of 128 operations per transaction.
//
// # Errors
//
// Errors keep etcd's error as their cause (errors.Is and errors.As reach
// it) and are marked with the meta sentinel callers branch on:
//
//   - the call's deadline or Options.RequestTimeout passing, gRPC
//     Unavailable (no leader, leader changed, server stopped, etcd's own
//     timeouts), etcd's ResourceExhausted (no space, too many requests),
//     or a closed client: meta.ErrUnavailable;
//   - gRPC InvalidArgument, and the client's own ResourceExhausted (a
//     request too large: etcd's --max-request-bytes is 1.5 MiB by default
//     and the client's send limit 2 MiB, so values near that size do not
//     fit): meta.ErrInvalid;
//   - the caller cancelling its context: the context's error, unmarked;
//   - Close while a call is in flight: that call returns meta.ErrClosed.
//
// A write that failed with ErrUnavailable may have been applied; the meta
// contract makes a retry after a fresh read safe.
package etcdstore
