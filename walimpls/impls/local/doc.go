// Package local is streamwal's embedded, durable backend: every channel of a
// root directory shares one group-committed journal on the local disk.
//
// # Why one journal
//
// A streaming node runs tens of channels, and the fdatasync budget belongs to
// the device, not to the file: K files that each sync per record add up to far
// fewer records per second than one file whose flusher coalesces everybody's
// records into one write and one fdatasync. So a root directory holds one
// stream of segment files shared by all its channels (like RocksDB's WAL for
// all column families, or BookKeeper's journal for all ledgers), and each
// channel keeps an in-memory index of where its records are, rebuilt on open.
//
// # Format
//
// The directory, the frames, batches and what recovery does with each kind
// of damage are written down in format.go, whose comment is the second part
// of this package documentation (go doc shows both, this part first).
//
// # Writing
//
// Deciding is apart from doing. A submitter (Append or AppendBatch,
// Truncate, a ReadWrite Open, Delete) decides its records itself, under the
// journal's mutex: it checks fencing once (its writer's claim, see Fencing
// and terms), takes the next sequence numbers, decides where the records go
// (starting the next segment when they do not fit) and frames them into the
// pending round (all the messages of a batch together, see Batches). An
// append is held back by the disk watermarks first, before it takes the
// mutex (see Disk space). One
// flusher goroutine owns the segment files: each round it takes everything
// pending (at most Config.MaxBatchBytes: a submitter waits for room beyond
// that, unless its records are alone), installs the segments the round
// starts, issues one write per segment and - depending on the sync policy -
// one fdatasync, then publishes the records to the channels' indexes and
// acknowledges the waiters. A reader sees a record only once it is
// published: written, and with SyncAlways synced. With SyncAlways a waiter
// is acknowledged after the fdatasync that covers its records (a batch's
// waiter after the one that covers the whole batch); with SyncInterval
// after the write, and the flusher syncs what it wrote once
// Config.SyncInterval has passed since its last sync (in a round, or on a
// ticker when idle; both timed on the clock of walimpls.WithClock, which tests replace with a
// fake one); with SyncNone an append is acknowledged as soon as it
// is framed, without waiting for the flusher (its write overlaps the
// appends that follow), so it may be acknowledged before it is published
// (Truncate, Last and a Latest read account for that). Term, truncate and
// delete frames are always synced before they take effect, whatever the
// policy, and a segment is always synced before the journal moves on to
// the next one, so only the last segment can ever hold unsynced bytes.
// A round that starts a segment is synced too, whatever the policy, before
// the segment is published, so that a published segment's start frame is
// always durable: from its publication on, the segment before it may be
// freed (see Truncation), and that start frame is then the only copy of
// every live channel's id, name, term and truncation point. It costs one
// fdatasync per segment switch, in the flusher: a SyncNone append does not
// wait for it, unless the pending round is full (Config.MaxBatchBytes),
// and then for that one more sync at most.
//
// AppendBatchAsync (walimpls.AsyncAppender) decides and frames its
// records the same way, in the caller's goroutine, and leaves a waiter
// that the flusher tells instead of one that blocks: it is answered when
// its round is acknowledged (at once with SyncNone, as AppendBatch
// returns). Rounds are acknowledged in framing order, so batches handed
// over one after the other are stored in call order.
//
// A failed write or sync is sticky: the flusher fails that round's waiters
// and every later append of the store with the same error, and never reports
// success after retrying a sync (the "fsyncgate" lesson: after a failed
// fdatasync the kernel may have dropped the dirty pages). SyncNone appends
// acknowledged before the failing round are lost with it. The same goes for
// any step of writing the journal marker (see Directory).
//
// Segments are prepared ahead of need by a background goroutine, because
// overwriting blocks that are already written makes each fdatasync much
// cheaper than extending a file or writing into merely fallocated
// (unwritten) extents. A segment freed by truncation is renamed to a spare
// and reused (recycled); only when no spare is left does the goroutine write
// zeros over a new spare file and sync it.
//
// A segment switch is decided by the submitter whose record does not fit:
// the framer keeps room in every segment for a seal frame and its end
// marker, reserves the seal's sequence number and offset, and frames the
// next segment's start. The flusher then (1) syncs segment N-1, whatever
// the policy, so that only the last segment can ever hold unsynced bytes
// and no later segment exists while N-1's frames may still tear, (2)
// renames a spare into place as the next segment N and syncs the
// directory, (3) writes the seal naming N (and an end marker) into N-1 and
// syncs it, (4) writes N's start frame (with the end of N-1, seal
// included) and the records after it, and (5) syncs N, whatever the
// policy, before it publishes the round and N with it. A crash at any step
// is recovered without losing an acknowledged record (see Recovery), the
// seal is never durable before N's name is, and N-1 is never freed before
// N's start frame is durable.
//
// A segment is filled up to the size in its start frame, taken from
// Config.SegmentBytes when it was started. Reopening with another
// SegmentBytes is a legitimate change: the segments already written keep
// their size (the active one is filled up to its own), the next ones take
// the new size, and Open logs both sizes at Info.
//
// # Fencing and terms
//
// The LOCK file is flock(2)ed exclusively by the process that opens the root;
// another process (or another Store in the same process) gets ErrLocked with
// the holder's pid. Inside the process, one Store serves several Openers
// (nodes) over the one journal. Each channel's term is stored in term frames
// (and in every segment start frame while the channel lives). A ReadWrite
// open below the stored term fails with a *walimpls.FencedError and changes
// nothing; an open above it writes and syncs a term frame; an open at the
// stored term writes nothing.
//
// Every ReadWrite open that is not refused claims the channel: under the
// journal's mutex, in framing order with every record, it takes the
// channel's next writer generation, and the WAL it returns carries it.
// Every append and truncate carries its WAL's generation and is checked
// against the channel's current one at the moment the record would be
// framed; a mismatch means a later claim - at a higher term, or at the same
// term (the later claim wins) - and is a *walimpls.FencedError (CurrentTerm
// equal to Term for the same term) with nothing framed. An Open returns
// only after the round that carries its claim, so an append of an earlier
// WAL that starts after a later Open returned is framed after the claim and
// refused: no append of a fenced writer is acknowledged once the Open that
// fenced it has returned. An Open whose context ends while its claim waits
// for its round has still claimed the channel (the earlier writers are
// fenced even though that Open failed), as a higher term's frame is still
// written.
//
// The generation lives in memory only, and need not be durable: it orders
// WALs of one Store, and a WAL never outlives its Store. The LOCK makes the
// process holding the root the only one that can write to it, and every
// Opener of that process shares the Store's one journal, its mutex and its
// channels, so every claim and every record of the root is decided under
// that one mutex. A Store opened later (after a Close, or in a process
// started after a crash) has no WAL of the previous Store left to fence:
// its generations start afresh, and only terms, which are durable, carry
// over. A closed WAL's owner reopening the channel claims it like any
// other open.
//
// # Truncation
//
// Truncate(id) writes and syncs a truncate frame holding the first kept seq
// and the seq of the last message it removed; reads from positions at or
// below the last removed message (StartFrom) or below it (StartAfter) are
// ErrPositionGone, and a scanner that falls behind a truncation ends with
// ErrPositionGone instead of skipping. A segment is deleted (or recycled
// as a spare) once it is not the last segment, every older segment has
// been deleted, and every channel that has messages in it has truncated
// past them or has been deleted. A reader still holding the file finds
// frames of another segment, or a closed file, and learns from the
// truncation point that its position is gone.
//
// The deletion (an unlink, or the rename that recycles the file) is not
// followed by a directory sync, and a file system may make it durable
// before bytes written earlier, or never before a power loss. Either way
// recovery must find a log that starts with a durable start frame: so a
// segment is freed only once the start frame of the segment after it is
// durable. The journal makes sure of it by publishing a segment only after
// a sync that covers its start frame (see Writing), and the collector
// frees only segments that are followed by a published one, never the
// last. A round whose write or sync fails publishes none of the segments
// it started (Close closes their files), so the segment before them stays
// the last one the collector sees.
//
// Nor does a file system promise to make unsynced directory changes
// durable in the order they were made: of two segments deleted one after
// the other, the later deletion alone may survive a power loss, leaving a
// gap in the segment numbers, which recovery takes for corruption. So the
// collector syncs the directory after each segment it frees, before it
// frees the next: the oldest segments go in order, one fsync of the
// directory each (one per SegmentBytes truncated, in the preparer's
// goroutine). When that sync fails, it frees nothing more until the next
// collection.
//
// # Deleting a channel
//
// Delete(name) ends a channel for good (the promise is in package
// walimpls, "Deleting a channel"). It is one more request to the journal,
// decided under the journal's mutex in framing order with every other
// record:
//
//   - The name is looked up in the store then. A name without a channel
//     frames nothing; its Delete still waits for the round in flight, so a
//     Delete racing another Delete of the same channel returns only once
//     that one has taken effect.
//   - A channel defined in the journal (it had a ReadWrite open) gets a
//     delete frame with its id and name, synced before the deletion takes
//     effect, whatever the sync policy, like term and truncate frames. A
//     channel never defined has nothing on disk and needs no frame (a
//     ReadOnly open of it is walimpls.ErrNoChannel and creates nothing,
//     also in memory).
//   - From the moment it is framed the channel is out of the store. Every
//     later record of its writers is refused with a *walimpls.FencedError
//     with Deleted set, and nothing is framed: an append framed before the
//     delete frame is stored and goes with the channel, one after it fails
//     and stores nothing. Later segment start frames leave the channel
//     out. An Open of the name finds a new, undefined channel, which its
//     first ReadWrite open defines under a new channel id, at any term;
//     an Open that found the deleted channel and whose claim would come
//     after the delete frame looks the name up again.
//   - Once the round is written and synced, the flusher publishes the
//     deletion: every writer of the channel, of every Opener of the store,
//     is fenced (Deleted); its index is dropped; its scanners wake and end
//     with ErrPositionGone after handing over what they had read ahead;
//     and the segments stop counting its messages, so a segment that held
//     only messages of deleted or truncated channels is freed by the pass
//     that frees truncated segments, which the deletion starts. Then
//     Delete returns.
//
// A crash before the delete frame is synced leaves the channel whole
// (Delete had not returned); after it, recovery replays the frame and the
// channel stays deleted, whatever segments were freed since. Its messages
// cannot come back: they were framed under the deleted id, no start frame
// after the delete frame lists it, and ids are never reused. Ids are 32
// bits: a store defines at most 2^32-2 channels over its life, and a
// ReadWrite open that would define one more is refused, with nothing
// framed.
//
// Compatibility: a root written before delete frames existed opens
// unchanged (it has none, and its start frames list every channel it
// defined, which is what they list now in a store that deleted nothing);
// the segments started after that list only live channels. A root in which
// a channel was deleted must not be opened by a version older than delete
// frames: it takes a delete frame for a damaged one, which is corruption
// in the middle of the log, and at the very end of the log a torn tail
// that it cuts, bringing the deleted channel back.
//
// # Disk space
//
// The journal takes space from the file system a segment at a time: the
// preparer zero-fills each spare to its full size (a recycled spare takes
// nothing new), and the flusher only overwrites those blocks. An ENOSPC
// in a write or a sync fails the journal for good (see Writing), so two
// watermarks of free space on the root's file system keep the journal
// away from it. Free space is what FS.FreeBytes reads: statfs(2), the
// blocks available to an unprivileged writer.
//
//   - Below Config.DiskHardFreeBytes (default 2 × SegmentBytes) appends are
//     refused with ErrDiskFull before anything is framed: the error is
//     marked walimpls.MarkNotStored, and walimpls.IsRetryable holds.
//     Term frames (ReadWrite opens, and the fencing they do), truncate and
//     delete frames are never refused, and reads go on: they are what
//     frees space. The watermark keeps room for their segment switches: no
//     spare is zero-filled ahead of need when that would take the free
//     space below it, but the one a switch needs now is, from that room.
//     The default leaves room for two switches: records that are never
//     refused, or an append admitted just before the crossing.
//   - Below Config.DiskSoftFreeBytes (default 4 × the hard watermark)
//     appends are throttled: each waits, before it takes the journal's
//     mutex and so without holding up anybody else, until its frames and
//     those of the throttled appends before it are paid for at
//     Config.DiskSoftWriteRate bytes per second (default 16 MiB/s, as
//     RocksDB's delayed writes; the generic cell rate algorithm, with a
//     50ms burst: a short burst passes at once, a sustained stream is held
//     to the rate). The wait is timed on the walimpls.WithClock clock and bounded by the
//     throttled bytes queued before it; it ends early when the pressure
//     ends (the append goes on), turns hard (it is refused), the store
//     closes, or its context ends (ctx.Err(), nothing stored). An
//     AppendBatchAsync waits in its caller's goroutine. Nothing but
//     appends is throttled.
//   - A state is entered as soon as a reading is below its watermark, and
//     left only once a reading is at least one segment above it: the
//     journal takes and gives back space a segment at a time, so a smaller
//     margin would flip the state at each spare and at each deleted
//     segment. Each crossing is logged once: a warning on the way down, an
//     info line on the way back.
//   - Below either watermark a truncated segment is deleted, not recycled
//     as a spare: a spare's blocks are not free space, and truncation must
//     show as free space to end the pressure.
//
// Readings are the preparer's, as are the spares; there is never one per
// append. It reads at open, before and after each spare it zero-fills
// (each segment framed, then), after each collection pass that freed a
// segment (so that appends pass again as soon as truncation freed room),
// when the flusher asks after a round once Config.DiskCheckInterval
// (default 500ms) has passed since it last asked (others may fill the file
// system), and every DiskCheckInterval while the free space is below a
// watermark, appends or none. A submitter only loads the pressure last
// decided (one atomic load), and the flusher reads the clock once a round.
// (A statfs took 5-10µs on the development machine; in
// BenchmarkAppendSyncNone and BenchmarkAppendSyncAlways the admission
// and the readings each took under 0.2% of the CPU samples.) A reading
// that fails leaves the pressure as it was, with one warning for a run of
// failures. With both watermarks DiskWatermarkOff the free space is never
// read.
//
// The series, registered while a watermark is on:
// streamwal_local_disk_free_bytes (the last reading),
// streamwal_local_disk_pressure (0 none, 1 throttling, 2 refusing),
// streamwal_local_disk_checks_total, and
// streamwal_local_disk_throttled_appends_total,
// streamwal_local_disk_throttle_seconds_total and
// streamwal_local_disk_refused_appends_total.
//
// The watermarks cannot stop another writer that fills the file system
// between two readings: the journal then fails on ENOSPC as it would
// without them.
//
// # Last
//
// Last returns the channel's last published message. With SyncAlways and
// SyncInterval an append is acknowledged after it is published, so that
// covers every acknowledged append. With SyncNone an append is
// acknowledged once framed, so Last first waits until the messages framed
// before the call are published (one write round, no fdatasync): the ID it
// returns can be read at once, and covers every acknowledged append.
//
// # Reading
//
// A scanner finds its messages in the channel's index and reads their
// frames with pread, never through the journal. A cursor.Tail(n) read
// starts at the n-th last entry of the index (the first kept when fewer
// are): one lookup, whatever the channel's length, so reading the end of
// a long channel reads no more than its end. Its goroutine reads up to
// its read-ahead budget (ReadOption.ReadAheadBytes, else
// Config.ReadAheadBytes) and at most 1 MiB at a time (a larger chunk
// leaves the CPU's caches before it is consumed), with one pread per run of
// neighbouring frames of a segment, so catching up on a busy channel costs
// few system calls; it checks the CRC of every frame, then hands the
// messages over one by one, or in slices of up to 256 to a batch scanner
// (ReadBatches). Its first read of a segment advises the kernel that the file is
// read sequentially, which doubles the kernel's read-ahead window: the disk
// reads the next chunks while the scanner decodes and hands over, and
// those pages sit in the page cache, not in the scanner's budget. (A second
// goroutine reading the next chunk into memory of its own was tried: it
// halves the size of each read within the same budget, and measured no
// faster.) At the tail the goroutine waits for the channel's next
// publication; nothing polls.
//
// Every message is checked against the truncation point just before it is
// handed over, so a chunk read before a truncation is not delivered past
// it. A read or CRC failure of a chunk whose first message was truncated
// meanwhile (its segment deleted or recycled under the reader) is
// ErrPositionGone; any other failure ends the scanner with that error,
// without delivering any message of the chunk.
//
// # Memory and limits
//
// Each channel's index holds 24 bytes per kept message; a deleted
// channel's index and state are dropped when its Delete returns (a WAL
// still open on it keeps only a few words of it). A segment start frame
// holds at most 46 bytes plus the name for each live channel (about 14
// plus the name while ids and seqs stay below 2^21), whatever the number
// of channels deleted before. Open reads every segment once (one segment
// in memory at a time) to rebuild the indexes and check every CRC, so
// opening takes time proportional to the data kept. A scanner holds at
// most its read-ahead budget of decoded messages, plus the one being
// handed over. Each pread goes into a buffer of its own that the
// payloads of its messages alias, so a consumer that keeps one message
// keeps that buffer alive; copying each payload out instead would cost
// more than the allocation saves. At most two spare segment files exist
// besides the live ones.
//
// # IDs
//
// Message IDs are message.SeqID values of backend "local": the global
// sequence number, marshalled in decimal.
package local
