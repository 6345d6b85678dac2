// Package chain keeps what a channel is made of once it can move between
// backends: an ordered chain of segments, each on one backend, of which
// only the last accepts appends. A channel that never moved is a chain of
// one segment, or no chain at all: nothing changes for it.
//
// The chain is control data in a meta.Store. This package defines its
// format, checks its invariants (Chain.Validate) and changes it with
// conditional writes (Store). It opens no backend: the drivers below do
// that, and record each step here.
//
// # Segments
//
// A chain is a channel name and its kept segments, in index order:
//
//	segment 3  backend kafka/orders-s3  first term 7  sealed at term 9, end "4411", tt 912
//	segment 4  backend local/orders-s4  first term 9  unsealed (the writable one)
//	pending    to pulsar/orders-s5 at term 12, by "walctl@ops-1", at 2026-12-05T14:02:11Z
//
// A Segment has:
//
//   - Index: the first segment is 0; each new one is the last one's plus
//     one. An index is never reused, also after its segment was pruned.
//   - Backend: where the segment lives, written once when the segment's
//     migration is requested and copied verbatim into the segment: Name,
//     the configuration entry it was built from ("kafka", or "kafka-east"
//     when a configuration names several); Kind, the backend's registered
//     name ("local", "memory", "kafka", "pulsar", "s3"); Channel, the
//     channel's name on that backend (a segment never shares it with
//     another kept segment on the same Name, so a sealed segment's data is
//     never written again, nor deleted with another's); Params, the backend's
//     settings that locate the data (broker addresses, a directory), as a
//     JSON object, without secrets. A node reopens a segment from what is
//     recorded, never from a configuration read later: the configuration's
//     entry of the same Name supplies only secrets (credentials, TLS), and
//     a node whose entry contradicts the recorded Params says so instead of
//     following either. A target is checked (Options.CheckBackend) when the
//     migration is requested and again just before the seal writes it.
//   - FirstTerm: the term whose owner opened the segment first. Segment
//     0's is the lowest term known when the chain was created (0 when a
//     channel that predates chains is adopted: every term below its seal).
//   - Seal, on every segment but the last: Term, the term that sealed it
//     (every writer of the segment is fenced on the segment's own backend
//     by an open at that term, and the seal is recorded only after that
//     open returned); End, the position of the last message readers
//     deliver from it (its backend's marshaled message ID, "" when they
//     deliver nothing); TimeTick, the highest timetick given in this
//     segment or any before it (the floor of the next segment's writer);
//     At, when it was recorded.
//
// Invariants (Validate checks each, on every read and before every write):
//
//  1. At least one segment is kept; indexes are consecutive.
//  2. Every segment but the last is sealed; the last is not.
//  3. Terms grow: a segment's seal term is above its first term, and the
//     next segment's first term equals that seal term.
//  4. Timeticks never go back: a seal's TimeTick is at least the previous
//     seal's, and above it when the segment delivers anything (End != ""),
//     so the next writer, which allocates above the last seal's TimeTick,
//     keeps timeticks strictly increasing across the seal.
//  5. Two neighbours are on different backends (Name); no two kept
//     segments share a backend channel (Name and Channel).
//  6. A pending migration targets a backend other than the last segment's,
//     on a backend channel no kept segment uses, at a term above the last
//     segment's first term.
//
// Readers never deliver past a sealed segment's End: records a fenced
// writer (or the sealing open itself) stored after it were never
// acknowledged, and are invisible. A reader of a sealed or pruned segment
// opens its backend read-only and never creates it again.
//
// # Migration
//
// A migration moves the channel's writes to a new segment on another
// backend. It is a term bump whose new owner opens on the new segment. The
// driver takes the seal term T from the channel's term authority before it
// starts (the coordinator's compare-and-set on the channel's term in a
// cluster; the walmanager's term for an embedded node), so no other owner
// ever opens the old segment at T. Each step is restartable, and the
// chain only ever moves forward:
//
//  1. Intent: BeginMigration records the pending migration (target
//     backend, T, who asked, when) on the chain whose last segment is k.
//     Refused while another is pending (ErrMigrationPending), when the
//     target is the last segment's backend (ErrSameBackend), when T is not
//     above segment k's first term (ErrStaleTerm), and when k is no longer
//     the last segment (ErrSegmentMismatch). Asking again for the same
//     migration (same target, term and requester) is a no-op.
//  2. Fence: the driver opens segment k on its backend at term T, which
//     fences every writer of k (each backend's own fencing), and reads
//     k's end: its last message and the highest timetick up to it. Nothing
//     is recorded.
//  3. Seal: Store.Seal writes, in one conditional write, k's Seal (T, the
//     end, the timetick) and segment k+1 (the pending target, first term
//     T), and clears the intent. Refused unless the chain's last segment
//     is k with a migration pending at T. Sealing what is already sealed
//     at T into the same target is a no-op that returns the stored chain:
//     its End is the truth, whatever the late caller read.
//  4. Open: the new owner opens segment k+1 at term T, allocating
//     timeticks above the seal's TimeTick, writes its term-begin, and only
//     then acknowledges appends.
//
// What a crash leaves, and who finishes it:
//
//   - Between 1 and 2: an intent; the old owner still writes on k. The
//     driver that finds it (the coordinator reconciling its planned moves,
//     the walmanager when it opens the channel) goes on with step 2, or an
//     operator cancels it (CancelMigration).
//   - Between 2 and 3: k is fenced but not sealed: appends fail until the
//     driver that finds the intent fences again at T (harmless: no data is
//     appended at T on k, and a second open at T fences the first or waits
//     for it to let go) and seals. A cancel here is still allowed: the
//     channel stays on k and its next owner opens above T.
//   - Between 3 and 4: the chain ends with k+1, which nobody opened yet:
//     whoever opens the channel at T or above opens k+1, as after any
//     move.
//   - During 4: an ordinary failed open on k+1: the next open recovers.
//
// CancelMigration removes the intent while k is still the last segment.
// Once sealed, a migration is undone by migrating again.
//
// Why nothing is lost, doubled or acknowledged after a seal (invariant 9
// of the design): the seal is recorded only after the open at T returned,
// so every writer of k has a lower term and is fenced on k's backend, and
// the End read after it covers every acknowledged append of k; appenders
// that met the fence retry on k+1, where idempotency keys remove what the
// retry doubled; readers deliver k up to End and then k+1 from its start,
// whose timeticks are all above k's.
//
// Drivers: package chainwal opens a channel as its chain at a term and
// runs steps 2 to 4 inside that open, so whoever opens the channel at T
// or above finishes a migration pending at T (an embedded node through
// chainwal.Opener.Migrate, its walmanager the term authority); in a
// cluster the coordinator records step 1 at the term it assigns (walctl
// migrate) and the node it assigns opens through chainwal; the pool's
// pruner truncates through the chain's WAL, which prunes segments.
//
// # Pruning
//
// A sealed segment is wholly below every checkpoint when every checkpoint
// of the channel names a later segment, or that segment's End. The pruner
// deletes the segment's data on its backend first (idempotently: data
// already gone is not an error), then drops it with DropFront, which only
// drops from the front and never the last segment. A crash in between
// leaves a segment without data in the chain; the next round drops it.
// The chain keeps the index of its first kept segment (Chain.First): a
// position in a dropped segment is walimpls.ErrPositionGone, never
// "unknown"; a position after the last segment is ErrUnknownSegment.
//
// # Positions
//
// A chain position is a segment index and a message ID of that segment's
// backend: cursor.Position, whose package defines its string grammar (a
// bare backend ID names segment 0) with the checkpoints that hold it.
//
// # Store layout
//
// One key per channel, its whole chain in one value, so that one
// conditional write changes it:
//
//	chain/<channel>  {"v":1,"channel":"orders",
//	                  "segments":[{"index":3,"backend":{"name":"kafka","kind":"kafka","channel":"orders-s3","params":{..}},
//	                               "first_term":7,"created":"<RFC 3339>",
//	                               "seal":{"term":9,"end":"4411","tt":912,"at":"<RFC 3339>"}},..],
//	                  "pending":{"target":{..},"term":12,"by":"walctl@ops-1","at":"<RFC 3339>"}}
//
// "v" is the format version (1). A value of a later version is
// ErrNewerFormat and is never rewritten by this reader; a value that does
// not decode, holds a field this version does not know (rewriting it would
// drop the field), or breaks an invariant is meta.ErrCorrupt naming the
// key and the broken rule.
//
// Every change reads the chain, checks the caller's expectation against
// it (the last segment index the caller decided on, and the pending
// migration it names), and writes conditionally on the revision it read.
// When another writer got there first, the Store reads again and checks
// again: a change that still applies is retried, one that already
// happened is a no-op, and one the other writer made impossible is its
// sentinel error (ErrSegmentMismatch, ErrMigrationPending, ...), whose
// message says what the chain is now and what to do. Two migrations of
// one channel can never fork it: both name the same last segment, and only
// one write conditional on it succeeds.
package chain
