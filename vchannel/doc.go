// Package vchannel is the data path of virtual channels: many logical
// streams (vchannels) multiplexed on one physical channel (a pchannel, an
// adaptor.WAL). Which vchannel lives on which pchannel is decided and
// persisted elsewhere (the pool); this package only writes and reads them.
//
// # A vchannel's view of its pchannel
//
// New(w, name) returns a WAL: the pchannel w seen as one vchannel. It owns
// nothing (closing the pchannel is its owner's job) and adds only this:
//
//   - Append, AppendAsync and AppendBatch stamp every message with the
//     vchannel's name (message.Message.WithVChannel). A message that already
//     names another vchannel is refused with ErrWrongVChannel before
//     anything is stored (walimpls.NotStored holds); a batch holding one is
//     refused whole. An AppendAsync refused so is called back as the
//     pchannel calls back its own appends (adaptor.AnswerAsync): on its
//     callback goroutine, in answer order, waited for by its Close.
//   - Read starts an adaptor scanner with Filter.VChannels set to the
//     vchannel: it delivers this vchannel's data messages only, in strictly
//     increasing timetick order, from the caller's DeliverPolicy, each
//     carrying its resume position (cursor.CheckpointOf works on it).
//     Control messages a caller asks for with Filter.Kinds (term-begins,
//     watermarks) belong to the whole pchannel and are delivered as the
//     adaptor delivers them.
//   - Sync, Available, Err and ParseCheckpoint are the pchannel's.
//
// A vchannel name follows the channel-name rules of
// walimpls.ValidateChannelName (1 to 128 bytes of [A-Za-z0-9._-], not "."
// or ".."); a bad one is a walimpls.ErrInvalidChannel error.
//
// # Replay: one read of the pchannel, fanned out
//
// Replay(ctx, w, consumers, opts) replays several vchannels of one
// pchannel, each from its own checkpoint, reading the pchannel once:
//
//	                          ┌─► stream vc-1 ─► consumer 1's reader
//	shared scanner ─► router ─┼─► stream vc-2 ─► consumer 2's reader
//	(one adaptor scanner)     └─► stream vc-3 ─► ...
//
// One adaptor scanner (the shared reader) starts at the earliest consumer
// checkpoint: at the lowest of their positions, delivering timeticks above
// the lowest of their timeticks (cursor.After); the two need not come
// from one checkpoint. The router hands each message to the stream of its
// vchannel when its timetick is above that consumer's checkpoint. What each
// consumer's scanner (Replayer.Scanner) delivers is therefore what a
// scanner of its own started at cursor.After(its checkpoint) would deliver:
// its vchannel's data messages with a timetick above its checkpoint,
// nothing lost, nothing twice, in strictly increasing timetick order, each
// keeping its resume position so that cursor.CheckpointOf works on it. The zero
// checkpoint means "from the start" (cursor.All).
//
// # Caught up
//
// A replay has a tail: ReplayOptions.CatchUpTo, or else the checkpoint
// adaptor.WAL.Tail returns as Replay starts (it appends a watermark; every
// message acknowledged before the call has a timetick at or below it).
// Replayer.CaughtUp(vchannel) is a channel closed once that consumer's
// reader has received, from its Scanner, every message of its vchannel
// with a timetick at or below the tail's and above its checkpoint:
//
//   - not before its reader took the last of them from Chan (what the
//     router queued for it does not count), and without waiting for any
//     message above the tail, which may be appended concurrently;
//   - for a vchannel with no such message, once the replay has read up to
//     the tail (a watermark at or above it, adaptor.CaughtUp, or a message
//     above it: data come in timetick order);
//   - at once, before Replay returns, for a consumer whose checkpoint is at
//     or past the tail;
//   - for a detached consumer, from its own scanner, which then also
//     delivers watermarks (never to the reader);
//   - never when the consumer's scanner ends first (Close, the WAL closed,
//     an error): a reader selects on its Done too.
//
// A consumer that serves once it has caught up:
//
//	s, _ := r.Scanner("vc-1")
//	up, _ := r.CaughtUp("vc-1")
//	for {
//		select {
//		case m, ok := <-s.Chan():
//			if !ok {
//				return s.Error()
//			}
//			apply(m)
//		case <-up:
//			up = nil // a nil channel never fires again
//			startServing()
//		}
//	}
//
// A read-only WAL writes no watermark and has no tail to take
// (walimpls.ErrReadOnly), nor has a WAL fenced by a higher term (whose
// owner may still replay its history, to learn which of its appends of
// unknown outcome were stored): without CatchUpTo the replay runs, and
// CaughtUp and Replayer.Tail report false. Pass the writer's tail, taken
// where the pchannel is written (its WAL.Tail), to know when a follower
// caught up. A closed WAL fails Replay with the error Tail returned.
//
// When a consumer's checkpoint is below the tail, the shared scanner also
// delivers the pchannel's watermarks (Filter.Kinds), for the whole replay;
// the router drops them.
//
// # Memory and slow consumers
//
// Each stream has a byte budget (Consumer.BufferBytes, by default
// ReplayOptions.BufferBytes, by default 1 MiB): the messages the router
// handed it that its reader has not taken yet (a message larger than the
// budget is still handed to a stream that holds nothing). A replay
// therefore holds at most its consumers' budgets plus what each adaptor
// scanner it reads holds (adaptor.Options.ScannerBufferBytes): the shared
// one, and one per detached consumer.
//
// When a message would take a stream above its budget, the router waits
// for that stream only while waiting holds nobody back: while every other
// attached stream still has something to deliver. As soon as another
// attached stream runs dry (its reader waits for the router), the full
// stream is detached: the router forgets it and goes on, and the stream,
// once its reader took what it holds, continues on an adaptor scanner of
// its own started at cursor.After(cursor.CheckpointOf(the last message it was
// handed)), or at its own checkpoint when it was handed nothing. Its reader
// sees one uninterrupted stream. A detached consumer stays detached, and
// reads the pchannel a second time from where it was: Replayer.Detachments
// counts detachments, the read amplification a replay paid. When every
// stream is as slow as the others, the router waits for them instead of
// detaching them all (which would read the pchannel once per consumer): a
// replay goes at the pace of its slowest consumer until one of the others
// runs dry. A vchannel with no messages to come counts as running dry.
//
// # Lifetime and errors
//
// A Replayer owns its goroutines: the router and one per stream, which
// hands the stream's messages to its reader (and reads its own scanner
// once detached). Replayer.Close stops and waits for all of them; it is
// idempotent, and every stream then ends with a nil Error, as an adaptor
// scanner does after Close. A stream's Close ends that stream only; when
// no attached stream is left, the shared scanner is closed.
//
// When the shared scanner ends with an error (the WAL closed, a truncated
// start position, a reorder buffer overflow), every attached stream
// delivers what it holds and then ends with that error: Error after Done,
// like an walimpls.Scanner. A detached stream ends with its own scanner's
// error. Closing the WAL therefore ends every stream with the error its
// adaptor scanner reports for a closed WAL (walimpls.ErrClosed).
//
// The context given to Replay bounds taking the tail and opening the
// shared scanner; the replay outlives it, as an adaptor scanner outlives the context of Read.
//
// # Costs
//
// The pchannel is read once, however many consumers a replay serves
// (BenchmarkReplay measures it: read amplification 1.0 with no consumer
// detached). When a consumer's reader waits and its stream holds nothing,
// the router hands it each message directly, so a message crosses as many
// goroutines as through an adaptor scanner; a reader that is busy is
// served by its stream's goroutine instead. The router never blocks on a
// reader while another waits, so one stalled reader costs the others
// nothing; a detached reader costs one more filtered read of the pchannel
// from its position. With more than a few dozen consumers the shared
// scanner is not filtered by vchannel (the adaptor's filter is a list) and
// the router drops the messages of other vchannels itself.
package vchannel
