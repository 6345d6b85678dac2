// Package retention releases a channel's log: its Retainer, run by the
// channel's owner, truncates each owned channel at the earliest checkpoint
// its consumers committed (package consumers), drops the sealed segments of
// its chain once every checkpoint is past them, caps by age and bytes what
// no consumer committed on (a Policy, off by default), and measures what
// the log retains and who holds it back.
//
// # The rule
//
// Each round of a channel reads its log from where the previous round
// stopped up to a tail it takes then (adaptor.WAL.Tail; the first round
// at a term reads from the channel's floor, where the log was last
// truncated, or from the oldest retained message), and learns, per
// vchannel, its first and last messages, and in blocks of the log how many
// messages and bytes lie where and since when. Then (decide, pure logic):
//
//   - a consumer of the whole channel holds the log back at its checkpoint;
//   - a consumer of one vchannel holds it back at its checkpoint when its
//     vchannel has a message after it up to the tail; otherwise it is idle
//     and holds nothing: when the truncation passes its checkpoint, the
//     consumer's resume point is recorded at the tail first (nothing of its
//     vchannel lies between; consumers.Store.Advance), and from then on it
//     holds at its resume point, where it reads from (a tail's position is
//     the watermark before its own: it may come before the consumer's own
//     checkpoint by position, though after it by timetick);
//   - without a consumer of the whole channel, a vchannel that has messages
//     and no consumer holds the log back at its first message, and so do
//     messages without a vchannel: what nobody committed on is kept;
//   - a channel without any consumer keeps everything;
//   - the Policy's cap (MaxAge, MaxBytes), when set, drops what is held
//     back only by the two rules before — never what a committed checkpoint
//     needs: a consumer that lags holds the log whatever the cap. What it
//     drops is counted (streamwal_retention_dropped_*) and logged.
//
// The target is the earliest hold, the tail when nothing holds. The round
// records it as the channel's floor (consumers.Store.Advance: commits
// before it are refused from then on), reads the consumers again, and
// truncates at the earliest of the target and every consumer's resume
// point: a commit that landed between the first read and the floor is seen
// by the second, and one after it met the floor. So nothing at or after a
// committed checkpoint is ever truncated, whichever owner runs the round
// and wherever a kill -9 stops it; a round a crash interrupted is redone by
// the next owner's first round, whose truncation goes through the floor
// recorded before the crash (Step names the points a crash test stops at). A truncation into a later segment of a
// chain deletes the earlier segments' data on their backends and drops them
// from the chain (chainwal's Truncate); a reader never recreates them.
//
// # When rounds run
//
// A commit through the owner (Notify) brings the channel's round within
// Config.CommitDelay, so the log follows its consumers closely; every owned
// channel also gets a round every Config.Interval (the age cap, a consumer
// dropped, a commit through an earlier owner). A round writes a watermark
// (Tail) and reads the log only when something was appended since the last
// one (Source.LastAppend): an idle channel costs one store read per
// Interval and writes nothing.
//
// # What it measures
//
// Stats: bytes (payload and properties, what a reader receives) and data
// messages retained, in all and per segment; the oldest retained message
// and its age; the consumer (or rule) holding the log back; the floor; what
// the policy dropped. The ledger keeps the log's counts in blocks (64 KiB
// or 256 messages; the older blocks of a channel that retains more than
// 512 blocks' worth merge, and grow coarser), and a truncation inside a
// block counts that block again (a read of one block at most), so the
// figures are exact but for merged blocks a policy's cap cuts into. The
// first round at a term reads the whole retained log from the floor on
// (a read that does not reach its tail within a round goes on in the next
// from where it stopped), so the
// figures of a channel that just moved are unknown until it ends.
//
// # Costs
//
// Measured 2026-12-07 on a 2-core machine (load average about 2, no race
// detector), one node appending through its API with 8 appenders of 1 KiB
// and a consumer tailing the channel, the checkpoints in an etcd of the
// same process (go test -run '^$' -bench 'TruncationCost|RetainedBytes'
// -benchtime 1x ./node/):
//
//   - what releasing the log costs the appends, appends/s with the
//     consumer committing ÷ without, median of 6 alternating pairs
//     (BenchmarkTruncationCost; goal ≥ 0.95): local (syncing every
//     append) 0.98 with a commit every 100 ms, 0.98 every second; Kafka
//     (kfake) 1.00 and 1.04. The retainer's own CPU is below a profile's
//     resolution; what remains is the fsyncs of the commits and floors in
//     the in-process etcd, on the local backend's disk.
//   - what a channel retains under that load with the consumer committing
//     every second, against the messages appended after its committed
//     checkpoint (BenchmarkRetainedBytes, every 250 ms, a read from the
//     oldest retained message; goal ≤ 2): median 1.00, max 1.00 on local
//     and Kafka in 7 runs of 40 samples each; one further Kafka run had
//     one sample of 40 at 5.06 (a truncation later than the sample after
//     its commit), not seen again.
package retention
