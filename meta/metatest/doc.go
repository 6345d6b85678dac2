// Package metatest is the conformance suite of meta.Store implementations:
// the definition of "a store works". Every store runs all of it:
//
//	func TestConformance(t *testing.T) {
//		metatest.Run(t, factory) // a metatest.Factory
//	}
//
// Each part runs as a named subtest on a new, empty store from the
// Factory. Every store call is bounded by a watchdog (its context's
// deadline, and a timer in case the store ignores it), and so is every wait
// on a goroutine, so a broken store fails a part instead of hanging the
// run. The Restart part runs only for a Factory that implements Restarter;
// otherwise it is skipped, saying so.
//
// The parts:
//
//	Lifecycle        Close is idempotent; Get, List, Put, Delete, Commit
//	                 after Close are ErrClosed
//	CloseInFlight    calls racing with Close end, each with success or
//	                 ErrClosed; a call started after Close returned is
//	                 ErrClosed
//	CRUD             absent, created, updated, deleted, created again; Get
//	                 and List report value and revision
//	Values           binary, nil, empty and 1 MiB values; binary, 0xff and
//	                 MaxKeyLen keys; the store copies values in and out
//	PutExpect        Absent, a revision, Any; a stale, future or
//	                 absent-key revision is ErrConflict and changes nothing
//	DeleteExpect     the same for Delete; a missing key with Absent or Any
//	                 succeeds and changes nothing
//	Revisions        every write's revision is above all earlier ones
//	                 (also for a key created again); Get and List report
//	                 the write's revision
//	ListPrefix       exactly the keys with the prefix, in byte order: a
//	                 prefix that is a key, prefixes sharing bytes, 0x00 and
//	                 0xff bytes, empty and too long prefixes
//	ListRevision     List's revision is at or above every earlier write
//	                 (also outside the prefix, also a delete) and below
//	                 every later one
//	ListSnapshot     keys always committed together are always listed with
//	                 equal values and revisions while a writer commits
//	Commit           conditions on existing, absent and unwritten keys;
//	                 puts and deletes applied at one revision
//	CommitConflict   any failing condition, first or last: ErrConflict
//	                 naming its key, nothing applied
//	ConcurrentCAS    8 goroutines × 25 read-Put-retry increments: no lost
//	                 update, the wins in revision order wrote 1, 2, 3, ...
//	ConcurrentCommit transfers between accounts under two conditions while
//	                 a reader lists: the total never changes
//	Invalid          empty and too long keys, expectations below Any, empty,
//	                 too large or self-contradicting Commits: ErrInvalid,
//	                 nothing changed; MaxKeyLen and MaxCommitOps accepted
//	Context          a cancelled or expired context: the context's error
//	                 from every method, nothing changed
//	Restart          (Restarter) everything survives two restarts, also
//	                 after a delete was the last write; later writes get
//	                 higher revisions
//
// The suite does not assume it owns the store's revision counter: on a
// shared etcd cluster other writers move it, so revisions are compared,
// never counted. The package's own test runs the suite against
// deliberately broken stores to show that each part can fail.
package metatest
