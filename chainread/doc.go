// Package chainread reads a channel across the segments of its chain
// (package chain): a consumer gets one scanner, with the shape of the
// adaptor's (Chan or Batches, Done, Error, Close), that delivers the sealed
// segments one after the other and then follows the last one live, and
// never notices the seals: with Config.Follow, not even those recorded
// while it reads.
//
// # What a scanner promises
//
//   - Each sealed segment is read from where the scanner starts in it up
//     to its seal's End, inclusive, and never past it: what a fenced writer
//     (or the sealing open) stored after End was never acknowledged, and is
//     not delivered. The segment's adaptor scanner (adaptor.ReadOption.Until)
//     releases, in timetick order, everything up to End even when no
//     watermark covers it: nothing acknowledged in the segment can follow.
//     A sealed segment with an empty End delivers nothing.
//   - The next segment is then read from its beginning, and the last
//     segment (unsealed) is followed live, as an adaptor scanner of a
//     read-only WAL follows a channel: its writer's watermarks release
//     what it appends. With Config.Follow the scanner learns when that
//     segment is sealed, and goes on (see Following the chain).
//   - Delivered timeticks strictly increase across the whole chain. The
//     scanner checks it (a message with a timetick at or below the one
//     delivered before it or the previous segment's Seal.TimeTick, or
//     above its own sealed segment's Seal.TimeTick)
//     and ends with ErrTimeTickOrder rather than deliver out of order: such
//     a chain's writer did not take its floor from the seal
//     (adaptor.Options.TimeTickFloor).
//   - Start policies (cursor.Policy) and filters are those of the
//     adaptor, with chain IDs for positions: cursor.All starts at the
//     first kept segment, cursor.Latest at the end of the last,
//     cursor.StartFrom and cursor.StartAfter at a chain ID (a bare backend
//     ID names segment 0), cursor.FromTimeTick in the first segment that
//     may hold the timetick, cursor.After at a checkpoint. The Filter
//     applies to every segment. cursor.Tail, a backend's start, is
//     adaptor.ErrInvalidOptions.
//   - Delivered messages' IDs and resume positions (LastConfirmed) name
//     their segment: they are chain IDs (cursor.ChainID; cursor.PositionOf
//     returns their cursor.Position, whose string a bare backend ID of
//     segment 0 shares), ordered by segment, then by the backend's order.
//     cursor.CheckpointOf and cursor.Checkpoint.Marshal give a consumer's
//     checkpoint, "<timetick>@<chain position>";
//     cursor.ParseChainCheckpoint reads it back without the chain's
//     backends, also one written by the adaptor before the channel had a
//     chain (segment 0).
//   - A start in a segment the chain dropped (pruned) is
//     walimpls.ErrPositionGone, from Read, at once; a start in a segment
//     after the chain's last is chain.ErrUnknownSegment. Neither is ever
//     retried.
//
// # Opening segments
//
// The Reader opens each segment's backend through Openers, which the
// caller gives (the opener of each backend entry by its Name: no globals),
// always ReadOnly, so that a reader never fences a writer and never
// creates a sealed or deleted segment again (a ReadOnly open of a channel
// that does not exist is walimpls.ErrNoChannel on every backend, and
// creates nothing). A sealed segment whose channel is gone, or whose data
// ends before its seal's End (the backend's Last, asked before reading),
// is walimpls.ErrPositionGone, never a wait for a message that will not
// come. The last segment's channel not existing yet (its writer did not
// open it) is walimpls.ErrNoChannel: read again later.
//
// One segment's WAL is open at a time: the scanner opens it when it starts
// reading the segment and closes it before it opens the next one.
//
// # Following the chain
//
// A migration seals the last segment while scanners follow it live: the
// driver fences the segment's writers on its backend at the seal term,
// reads its end and records the seal with the next segment in the chain
// (chain.Store.Seal). A scanner learns it from Config.Follow, which
// returns the chain as it is now (typically the chain store's Get). While
// it follows the last segment live, the scanner asks it every
// FollowInterval (default 250ms), and at once when the segment's adaptor
// scanner ends or fails (a fenced reader's ErrFenced among them). When
// the chain shows the segment sealed:
//
//   - The scanner checks what it delivered against the seal: a timetick
//     above the seal's TimeTick was written after the End by a writer the
//     seal did not fence (possible only on a backend that cannot fence,
//     if a watermark released it before the seal was learned): it ends
//     with ErrTimeTickOrder rather than go on out of order.
//   - It closes the segment's live scanner and reads the segment again
//     with adaptor.ReadOption.Until at the seal's End, from right after
//     what it delivered: cursor.After the checkpoint of the last message
//     delivered (its resume position and the highest timetick delivered),
//     or from where it started in the segment when it delivered nothing
//     (a cursor.Latest scanner that follows Config.Follow starts right
//     after the segment's last message when it opens it, so that this
//     start is a position). The read-again delivers, in timetick order,
//     exactly what the live scanner had not: what no watermark had
//     released yet when the seal came is released at End, and what a
//     fenced writer stored after End never is. Nothing is delivered twice.
//   - Then the next segments, as the chain Follow returned has them
//     (one or several seals later), and the new last one live, followed
//     again. Timeticks are checked across every seal as above.
//
// The consumer sees one scanner throughout: no restart, no gap, IDs that
// name each message's segment. When the segment's adaptor scanner ends
// and the chain does not show the segment sealed, the scanner ends with
// that scanner's error, as without Follow; but for ErrFenced while the
// chain has a migration pending: the seal is on its way, and the scanner
// waits for it, asking every interval.
//
// Follow failing (or returning a chain that does not validate) is logged
// once while it fails alike, at Warn, and asked again at the next
// interval; the scanner goes on delivering the live segment meanwhile.
// A chain that no longer continues the scanner's ends it: the segment it
// reads dropped (walimpls.ErrPositionGone), on another backend or from
// another first term, missing from a chain that ends before it, or
// another channel's (ErrChainChanged). Follow is called on the scanner's
// goroutine with a context Close cancels: the scanner delivers nothing
// while a call lasts.
//
// A cursor.Latest scanner, and one that starts in a segment after the
// Reader's chain's last, start on the chain Follow returns at Read. Other
// scanners start on the Reader's chain and learn the rest at their first
// ask. Reader.Chain stays the chain the Reader was given.
//
// Without Follow (nil) the scanner reads the chain it was given: a seal
// recorded after it started is never learned, and the scanner keeps
// following the sealed segment, which receives nothing more; its consumer
// restarts it from its checkpoint with the new chain.
//
// # Goroutines
//
// A scanner has one goroutine of its own, which opens, reads and closes
// the segments and hands their messages to the consumer; the adaptor
// scanner of the current segment has its own (the adaptor's). The same
// goroutine asks Follow, on a timer of Config.Clock: no goroutine is added
// to follow the chain. Close stops the goroutine and waits for it, which
// closes the segment's WAL and so waits for the adaptor's.
//
// # Costs
//
// BenchmarkScanAcrossSeal (a catch-up scan of 100,000 small messages, half
// on each side of a seal, against the same number on one segment read by
// the adaptor itself, sides alternating; 2026-12-05, a 2-CPU machine
// whose speed swings with its neighbours'). Message by message (Chan), 8
// samples on memory and local, interleaved with the same binary without
// the channel buffer (chanBuffer): throughput 0.99 (0.76-1.03), CPU per
// message 0.95 (0.80-1.05); without the buffer 0.76 and 0.78. In slices
// (Batches), 8 samples: throughput 1.00 (0.78-1.07). The goal, 0.95, is met
// at the medians, not in every sample. The seal itself costs nothing
// measurable: the same messages on a chain of one segment read through this
// package ÷ the chain of two, CPU per message 0.98 (0.80-1.10). What this
// package adds over the adaptor is its own goroutine between the segment's
// adaptor scanner and the consumer (one more hand-off per slice) and a
// chain ID per message (allocated per slice).
//
// Following the chain costs one store read (a Follow call) per
// FollowInterval per scanner that follows a live segment, four a second
// at the default, whether or not anything changed: a thousand live
// scanners on one store make four thousand reads a second. Raise the
// interval where that matters; the price is the delay before a scanner
// moves on after a seal (up to one interval and a read). A seal learned
// costs a second open of the sealed segment (read-only) and a read of it
// from the last delivered resume position to End, usually a watermark's
// worth of messages. Scanners reading sealed segments ask nothing.
package chainread
