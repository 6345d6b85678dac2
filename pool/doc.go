// Package pool keeps a persisted pool of physical channels (pchannels) and
// allocates virtual channels (vchannels) to them, so that many logical
// streams share a bounded number of backend channels, and a restart maps
// every vchannel to the same pchannel.
//
// A Pool lives in a meta.Store (bbolt embedded, or etcd for several
// processes). Everything it decides is persisted before it is used; its
// memory is a cache of the store, refreshed when another process wrote.
//
// # What it promises
//
//   - The pool's pchannels exist on the backend before they are handed
//     out: Open creates what is missing (through walimpls.Creator when the
//     backend's opener implements it) and only then records it, so a
//     restart creates nothing twice and a crash in between is repaired by
//     the next Open. Two processes opening one pool at once end with one
//     pool: compare-and-set on the store decides.
//   - Growing Config.Size adds pchannels without moving any vchannel;
//     shrinking is refused (ErrShrink). A stored pool whose prefix or
//     backend differs from the configuration is refused (ErrConfigMismatch).
//   - Allocate is idempotent and atomic: a vchannel keeps its pchannel until
//     it is released, whoever asks; a batch is allocated whole or not at
//     all (at most MaxBatch vchannels); two allocators, in one process or
//     several, never give one vchannel two pchannels, also when the store's
//     answer to a commit is lost (every commit is conditional on the
//     allocation head the allocator read).
//   - Where a new vchannel goes is the strategy's choice (Config.Strategy):
//     round-robin, least-loaded, or a Placer the embedder supplies by name
//     (Options.Placers). Whatever it answers, a batch is still allocated
//     whole or not at all; an answer outside the pool fails the batch.
//   - Checkpoints are per vchannel, fenced by term: a save with a lower term
//     than the stored one is refused (ErrStaleTerm), and within one term a
//     checkpoint never moves back.
//   - Pruning never removes what a vchannel has not checkpointed, and only
//     vchannels with something left to process hold their pchannel back.
//     The Pruner reads each pchannel it owns up to its tail (WAL.Tail), on
//     from where its previous round stopped, and learns per vchannel its
//     last message, whoever appended it. Then (PruneTarget): a vchannel
//     with a message after its checkpoint holds the pchannel back at its
//     checkpoint; one with messages and no checkpoint, at its first
//     message; one with nothing after its checkpoint, or neither a
//     checkpoint nor a message, holds nothing back up to the tail; a
//     released one holds nothing. The pchannel is truncated at the earliest
//     of what is held, at the tail when nothing is. An idle vchannel whose
//     checkpoint the truncation passes resumes at the tail instead: the
//     pool records that before it truncates, and Checkpoint gives it
//     (nothing of the vchannel lies between). A restarted pruner reads the
//     log again from its oldest retained message and holds the pchannel
//     back where the one before it did. Consumers resume from Checkpoint:
//     a scanner of an idle vchannel that lags behind the truncation ends
//     with walimpls.ErrPositionGone, and resumes from there losing nothing.
//
// # Store layout
//
// Every key lives under "pool/<name>/"; values are JSON objects with a
// version field "v" (1), so that a later version can read them and an
// unknown version is a clear error (meta.ErrCorrupt), never a guess.
//
//	pool/<name>/config                {"v":1,"backend":..,"prefix":..,"size":N,"strategy":..}
//	pool/<name>/pchannel/<pchannel>   {"v":1,"index":i}         created on the backend
//	pool/<name>/alloc/head            {"v":1,"next":S,"rr":R}   the allocation head, R the turn
//	pool/<name>/alloc/log/<S as %020d> {"v":1,"alloc":[[vchannel,pchannel],..],"release":[vchannel,..]}
//	pool/<name>/checkpoint/<vchannel> {"v":1,"alloc":S,"term":T,"tt":TT,"cp":"<adaptor checkpoint>"}
//	pool/<name>/resume/<pchannel>     {"v":1,"vchannels":{<vchannel>:{"alloc":S,"from":F,"tt":TT,"cp":"<adaptor checkpoint>"},..}}
//
// A checkpoint names the record S that allocated its vchannel: one left
// over from an earlier allocation of the same name (released since) is
// ignored.
//
// A resume entry moves an idle vchannel's resume point past its checkpoint,
// to the tail cp (timetick TT) a prune round read the pchannel up to: the
// vchannel had no message between its checkpoint at timetick F and TT. It
// applies while the vchannel's checkpoint is of allocation S, at or after F
// and before TT; the pruner rewrites the pchannel's entries (conditional on
// the revision it read) before it truncates past a checkpoint, and drops
// those that no longer apply. A streamwal that predates resume entries
// ignores them: its consumers resume at their own checkpoint, which may be
// truncated (walimpls.ErrPositionGone), never silently skipped.
//
// The allocation table is a log of records, one per Allocate or Release
// batch. A batch commits its record at sequence S and the head (next S+1,
// the turn R: how many vchannels the strategies placed, round-robin's
// cursor) in one store transaction conditional on the
// head's revision, which covers every record before it: a batch is atomic
// whatever its size (the record is one value, so it does not meet etcd's
// limit on operations per transaction), and two allocators cannot both
// commit on the same head. The table is the log replayed in order; the pool
// replays it when it opens and again when the head moved under it.
//
// # WAL options
//
// Each allocation yields an encoded, versioned string a node decodes to
// open the vchannel (DecodeWALOptions):
//
//	{"v":1,"backend":"kafka","pool":"default","pchannel":"wal-3","vchannel":"orders"}
package pool
