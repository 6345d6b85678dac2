// Package consumers keeps, per channel, the checkpoints its consumers have
// committed, and how far the channel's owner may truncate its log because
// of them. It is the record that lets a cluster release its logs: a
// consumer (a database's flusher, an index builder) commits where it has
// durably processed a channel or one vchannel of it, and the owner deletes
// what every consumer is past (package retention decides how far).
//
// # What it promises
//
//   - A consumer is a name and a scope: the whole channel, or one vchannel
//     of it. Several consumers of one channel each keep their own
//     checkpoint; the log is kept for the slowest.
//   - A committed checkpoint never moves backwards: a commit before the
//     stored one is ErrBackwards (a stale consumer: a restarted instance
//     replaying, a duplicate). Committing the stored checkpoint again
//     succeeds and changes nothing.
//   - A commit carries the term of the channel's owner that accepted it; a
//     commit through an owner of a lower term than the stored checkpoint's
//     is ErrStaleTerm (a newer owner took over).
//   - Nothing at or after a committed checkpoint is ever truncated: the
//     owner records its truncation point (the floor) before it truncates,
//     and a commit before the floor is ErrTruncated (its data is gone, or
//     about to be). Every write is conditional on the floor as it was read,
//     so a commit and a truncation never pass each other: either the commit
//     is stored first and the owner's check after its own floor write sees
//     it (Store.Load), or it meets the new floor and is refused.
//   - An idle vchannel consumer never holds its channel back: when the owner
//     truncates past the checkpoint of a vchannel consumer that has no
//     message of its vchannel between its checkpoint and the owner's read
//     tail, it records a resume point for it there first (Checkpoint.Resume,
//     Store.Advance); the consumer resumes from Checkpoint.ResumeAt and
//     finds every message of its vchannel.
//   - The floor only moves forward, and only the owner of the floor's term
//     or a later one moves it (ErrStaleTerm otherwise).
//
// The store orders checkpoints by their positions, decoded with the
// channel's own parser (the WAL's ParseCheckpoint): a chain position, a
// backend ID. A checkpoint that does not decode is refused before anything
// is written.
//
// # Store layout
//
// Every key lives under a prefix in a meta.Store (walnode keeps it in the
// cluster's meta store, beside the pool and the chains), default
// "checkpoints/"; values are JSON with a version field "v" (1), so that a
// later version reads them and an unknown version is meta.ErrCorrupt, never
// a guess:
//
//	checkpoints/<channel>/floor                     {"v":1,"cp":..,"tt":TT,"term":T,"at":..}
//	checkpoints/<channel>/c/<consumer>              {"v":1,"cp":..,"tt":TT,"term":T,"at":..[,"resume":..,"rtt":RTT]}
//	checkpoints/<channel>/v/<vchannel>/<consumer>   the same, for a consumer of one vchannel
//
// A channel's state is one List of its prefix; every commit is one Commit
// of the store conditional on the consumer's key and on the floor's
// revision as read (two Gets before it). Channel, vchannel and consumer
// names follow walimpls.ValidateChannelName, so "/" never appears in them
// and one channel's prefix never covers another's.
package consumers
