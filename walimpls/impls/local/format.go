// # Directory
//
//	<root>/LOCK                     flock(2)ed by the owning process; holds its pid
//	<root>/JOURNAL                  the journal marker: this root's journal was
//	                                written (see below)
//	<root>/wal-0000000000000001.log segment 1
//	<root>/wal-0000000000000002.log segment 2 ...   (contiguous numbers)
//	<root>/spare-N.tmp              up to two next segments, prepared ahead of
//	                                need (zero-filled, or recycled)
//	<root>/JOURNAL.tmp              the journal marker being written
//
// A segment file is named after its number in hexadecimal, zero-padded to
// 16 digits: segment 26 is wal-000000000000001a.log, so the names sort in
// segment order. (A spare's N is a counter, not a segment number.)
//
// Segment numbers are contiguous: a gap is corruption. Only the oldest
// segments are ever deleted (see Truncation), never the last one. Every
// segment but the last ends with a seal frame naming the next one, so the
// loss of the newest segment file is detected (see Recovery).
//
// The journal marker JOURNAL records that the root's journal exists, so that
// a root whose segment files were all deleted (the only one, say) is told
// from a root never written. It holds the 24 bytes
// "streamwal local journal\n" and nothing else. It is written once in the
// root's life, when the root's first segment has become durable - its file
// renamed into place and the directory synced, and its start frame
// fdatasynced - and never before: the bytes go to JOURNAL.tmp, which is
// fdatasynced and renamed to JOURNAL, and the directory is synced. So a root
// opened and closed without writing has no marker, a marker never tears, and
// the journal never leaves a marker without a segment whose start frame was
// durable. The flusher writes it after the root's first fdatasync (the first
// round of a root always holds a term frame, which is synced whatever the
// policy), before that round is acknowledged; a failure fails the journal
// like a failed sync (see Writing). A root written before the marker
// existed, or by a process that died between its first fdatasync and the
// marker, has segments and no marker: recovery writes it (see Recovery).
// Versions older than the marker ignore it.
//
// # Frames
//
// A segment is a sequence of frames starting at offset 0. Every frame starts
// at an offset that is a multiple of 8 and is padded with zeros to the next
// multiple of 8: header fields are naturally aligned, and recovery can look
// for frames past a damaged one at 8-byte steps. A frame cannot tear
// silently: its CRC covers the header (but the CRC field) and the body, so a
// write torn anywhere in the frame fails the check. All integers are
// little-endian.
//
//	 0       4       8              16      20      24      28  29  30  32
//	+-------+-------+---------------+-------+-------+-------+---+---+---+
//	| crc   | len   | seq           | seg   | synced| chan  |typ|flg|0 0|
//	+-------+-------+---------------+-------+-------+-------+---+---+---+
//	| body: len bytes                                  | pad to 8 (zero) |
//	+--------------------------------------------------+-----------------+
//
//	crc     CRC-32C (Castagnoli) of bytes [4, 32+len): the rest of the header
//	        and the body (not the padding)
//	len     body length in bytes
//	seq     global sequence number: strictly increasing over the whole
//	        journal, across segments and reopens; a message's ID is its seq
//	seg     number of the segment the frame was written to (low 32 bits), so
//	        a frame copied or left over from another segment is never valid
//	synced  offset in this segment up to which the file was known to be
//	        fdatasynced when the frame was written (see Recovery)
//	chan    channel id (0 for frames that belong to no channel)
//	typ     1 segment start, 2 message (unstamped; read, no longer
//	        written), 3 term, 4 truncate, 5 seal, 6 delete, 7 message
//	flg     flags: 1 "more": the next frame belongs to the same batch
//	        (message frames of either type only; see Batches); 0 on every
//	        other frame
//	0 0     zero
//
// Bodies:
//
//	segment start  magic "swlocal1", uvarint end of the previous segment's
//	               frames, its seal included (0 for none), uvarint flags
//	               (1: the file is a recycled segment; 2: a segment size
//	               follows), if flag 2: uvarint segment size (the bytes
//	               the segment may fill, 64 KiB to 1 GiB), uvarint next
//	               channel id, uvarint n, then n times: uvarint id,
//	               uvarint len+name, varint term, uvarint truncate seq,
//	               uvarint last removed seq, uvarint last seq
//	message        the message's stamp (its kind, term and timetick in
//	               binary: message.Message.AppendStamp documents the
//	               bytes), then as an unstamped message: the properties the
//	               stamp does not hold, then the payload
//	unstamped      uvarint n properties, n times (uvarint len+key,
//	message        uvarint len+value), then the payload to the end of the
//	               body
//	term           varint term, uvarint len+channel name (the first term frame
//	               of a channel id defines it)
//	truncate       uvarint first kept seq, uvarint last removed seq
//	seal           uint64 number of the next segment (8 bytes; chan 0)
//	delete         uvarint len+channel name: the name the channel id in the
//	               header was defined with (see Deleting a channel)
//
// The first frame of every segment is a segment start frame: a snapshot of
// every live channel's id, name, term and truncation point at that moment
// (live: defined by a term frame and not deleted since). So every segment
// is self-describing, and deleting the oldest segments never loses a live
// channel's definition, term or truncation point; a deleted channel is in
// no later start frame, so the frame's size follows the live channels, not
// every channel the store has seen.
//
// The last frame of every segment but the last is a seal frame naming the
// next segment; nothing follows it but an end marker. It is written only
// once the next segment's file is in place and the directory synced, so a
// seal proves that the next segment's file existed. Segments written
// before seal frames existed end without one, and no segment start before
// them records a size (flag 2); both are accepted.
//
// Every write of the journal is followed by an end marker: 32 zero bytes
// where the next frame will go, which the next write overwrites; the framer
// keeps room at the end of every segment for a seal (40 bytes) and the end
// marker after it. (A segment of the previous format may end without room
// for a marker; recovery takes the end of the file as one.) So the end of the log is explicit even in a
// recycled file, whose older frames follow it, and a frame left past the end
// by a torn write can never be mistaken for the continuation of the log.
//
// # Batches
//
// Message frames are written with type 7 (stamped): the kind, term and
// timetick every record of a WAL carries take a few bytes of binary
// instead of three properties, and a reader builds no property map for a
// record that has no other properties. Type 2 frames, written before, are
// read unchanged (a batch may mix both types); a root written since must
// not be opened by an older version, which takes type 7 for damage.
//
// A batch (AppendBatch; an Append is a batch of one) is a run of message
// frames of one channel with consecutive sequence numbers, contiguous in
// one segment: every frame but the last has flag 1 ("more"), the last has
// 0. Frames written before the flag existed have 0: each is a batch of one,
// so logs of the previous format open unchanged. (The previous format's
// readers take a frame with a flag for a damaged one: a root written with
// batches must not be opened by a version older than the flag.)
//
// A batch never straddles segments: the submitter frames all of it at once,
// under the journal's mutex, and when it does not fit in the rest of the
// segment it starts the next segment first. A batch that does not fit even
// in an empty segment (SegmentBytes less the start frame and the room kept
// for the seal) is refused with ErrTooLarge naming that room, and nothing is
// framed. So a batch is one piece of one flush round: one write, covered
// whole by that round's fdatasync, acknowledged once for all its messages.
//
// Recovery keeps a batch whole or drops it whole (see Recovery): the log
// ends after the last frame without the flag, never inside a batch.
//
// # Recovery
//
// Open locks the root, removes leftover spares and a leftover JOURNAL.tmp,
// and replays every segment in order, rebuilding each channel's index, term
// and truncation point. The frames of a segment end at the first offset X
// where no valid frame of this segment starts.
//
//   - The journal marker (see Directory) tells a root never written from a
//     root whose journal vanished. No marker and no segment file: a root
//     never written, which opens empty. A marker and no segment file: the
//     segment files were deleted, and with them every channel's messages,
//     terms and truncation points; Open fails with ErrCorrupt naming the
//     directory and the way out: restore the directory from a backup, or
//     remove the marker to open it as a new, empty store. A marker whose
//     content is not the 24 bytes above (damaged, or not ours) is
//     corruption too: Open fails with ErrCorrupt naming it. Segments and no
//     marker (a root written before the marker existed, or a process that
//     died before it wrote the marker): once the segments are replayed,
//     recovery writes the marker as the flusher would, before Open returns,
//     unless no segment is left (see the torn switch below); a failure to
//     write it fails Open, and the next Open tries again.
//   - A segment but the last must end with its end marker (or the end of the
//     file) exactly where the next segment's start frame says it ended, and
//     its seal, if it has one, must name the next segment. Anything else - a
//     bad frame, a zeroed frame, a missing segment, a frame after a seal -
//     is corruption in the middle of the log: Open fails with ErrCorrupt
//     naming the segment and offset (or the missing file). It never skips.
//   - The last segment present must not end with a seal: a seal naming N
//     while N's file is missing means the newest segment was deleted (the
//     journal never seals before N's name is durable, and never deletes the
//     last segment). Open fails with ErrCorrupt naming N's file.
//   - The oldest segment present must hold every message the channels
//     keep: its start frame says each channel's last message before it, and
//     a channel whose truncation point (after replay) is at or below that
//     message kept messages in a segment that is gone - the oldest segments
//     were deleted by hand (the journal deletes only segments whose
//     messages every channel has truncated). Open fails with ErrCorrupt
//     naming the missing file.
//   - The last segment ends cleanly at an end marker followed by zeros (or,
//     in a recycled file, by anything but frames of this segment). Otherwise
//     recovery looks past X for valid frames of this segment: if one of them
//     has a synced field above X, the bytes at X had been synced and were
//     damaged afterwards: corruption, Open fails. If not, the damage is a
//     torn write of records that were never acknowledged (with SyncAlways):
//     the file is truncated at X and synced, and the dropped bytes and frames
//     are logged and counted (Store.Recovery and the
//     streamwal_local_recovery_dropped_bytes_total metric). Appends continue
//     at X.
//   - When the last valid frame before X has flag "more", the last segment
//     ends inside a batch: its write was torn, so it was never acknowledged
//     (the journal writes a batch at once and syncs it whole). The cut goes
//     back to the batch's first frame B instead of X, after the same check
//     from B (a frame past B claiming B synced is corruption), and none of
//     the batch's frames is replayed: the log keeps the batch whole or
//     drops it whole, whatever the policy. A batch that ends X in a segment
//     but the last, and a flagged frame followed by anything but the next
//     message of its batch (same channel, next seq), are corruption.
//   - A last segment N whose start frame is missing or invalid is a crash
//     during a segment switch, not corruption. If segment N-1 ends with a
//     valid seal naming N (the crash came between steps 3 and 4), recovery
//     completes the switch: it cuts N's file to nothing (what it held is
//     checked, cut and counted like a torn tail), writes N's start frame (a
//     snapshot of the replayed state, sequence number after the seal's) and
//     an end marker, syncs it, and the journal goes on in N - never after a
//     seal. Otherwise (the crash came before the seal was
//     durable) N's file is removed and synced away, N-1 is the last segment
//     (a torn seal at its end is cut like any torn tail), and the journal
//     goes on in N-1; the next switch installs N again.
//   - When that N is the only segment file, there is no N-1. Without a
//     journal marker this is taken for a crash during the root's first
//     round, before anything was synced: N's file is removed as above, and
//     the root opens empty, as never written (and gets no marker). With a
//     marker it is corruption: the marker proves that a segment's start
//     frame had been durable, the journal installs a segment only while
//     the one before it exists, and it frees that one only once N's start
//     frame is durable (see Truncation), whatever the sync policy, so N's
//     start frame was damaged, or the segment files before N were deleted.
//     Open fails with ErrCorrupt naming N's file, and removes nothing.
//   - Sequence numbers must strictly increase and segment numbers must be
//     contiguous; anything else is corruption.
//   - A delete frame ends its channel id: replay drops the channel (its
//     index, term and truncation point) and frees its name, so a later term
//     frame may define the name again under a new id. A delete frame of an
//     id that is not defined at that point, or whose name is not the one
//     the id was defined with, and any frame of the id after its delete
//     frame, are corruption (the journal frames none of them).
//
// Blind spots that are accepted:
//
//   - In a recycled last segment, a torn write whose first sector was lost
//     and that left no complete frame behind is not reported (its bytes
//     cannot be told from the older segment's).
//   - Deleting the journal marker together with every segment file is not
//     detected: the root then looks like a root never written, and opens
//     empty, without the channels' messages, terms and truncation points.
//     (Deleting every segment file and leaving the marker is detected, see
//     above; deleting the marker alone is repaired: recovery writes it
//     again.)
//   - Deleting the newest segment together with the seal that names it
//     (editing the file before it) looks like a crash before the seal, and
//     deleting oldest segments whose messages every channel has truncated
//     is what the journal itself does; neither is reported.
//
// With SyncInterval or SyncNone an operating-system crash may lose
// acknowledged records at the tail (never records in the middle). With
// SyncInterval a process crash loses nothing that was acknowledged, because
// acknowledged records were already written to the kernel. With SyncNone a
// process crash may also lose a tail of acknowledged records: those still
// in the journal's buffers (at most twice Config.MaxBatchBytes: the pending
// batch and the one being written).
package local
