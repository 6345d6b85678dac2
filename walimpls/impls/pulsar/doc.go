// Package pulsar is the Apache Pulsar backend of streamwal, built on
// pulsar-client-go (v0.19.0) and tested over the wire against the in-repo
// broker internal/pulsartest.
//
// # Layout
//
// Each channel is two non-partitioned persistent topics in Config.Tenant /
// Config.Namespace:
//
//	persistent://<tenant>/<namespace>/<prefix><channel>        the log
//	    one message per append
//	    payload    = Message.Payload
//	    properties = every property, reserved "_" keys included, byte
//	                 for byte (keys and values are strings)
//	    MessageID  = (ledger, entry, batch index, partition), see below
//	persistent://<tenant>/<namespace>/<prefix><channel>=meta   the meta topic
//	    empty payloads; properties
//	    {"k":"claim","term":"<decimal>","nonce":"<32 hex>"}   a term claim
//	    {"k":"trunc","id":"<marshalled MessageID>"}           a truncation
//	    {"k":"claim","term":"9223372036854775807",
//	     "nonce":"<32 hex>","deleted":"1"}                    a deletion
//
// "=" cannot occur in a channel name or a topic prefix, so no channel's log
// is another channel's meta topic. Both topics carry the durable
// subscription Config.Subscription, created at the earliest position by
// every ReadWrite open before anything is written: it keeps every message
// from the broker's retention until Truncate acknowledges it (Pulsar deletes
// what no subscription still needs). The namespace must not have a time or
// size retention or a backlog quota that evicts unacknowledged messages.
//
// # Message IDs
//
// An ID is the message's (ledger, entry, batch index, partition), ordered in
// that order; batch index -1 (a message sent without batching) sorts before
// index 0, and the partition is always 0 here. It marshals to
// "ledger:entry[:batch][@partition]" in canonical decimal ("42:7:3");
// anything else is message.ErrCorruptID. Entry ids are consecutive within a
// ledger and start at 0; a topic moves to a new, higher ledger when it is
// loaded again (an unload, a broker restart) — the scanner's gap check relies
// on both facts.
//
// # Appends
//
// Every ReadWrite WAL has its own pulsar.Client and one producer, so that
// Close really drops the broker's registration. An Append is an AppendBatch
// of one message. One goroutine queues the batches, hands their messages to
// the producer with SendAsync in queue order — a batch's messages one after
// the other, in slice order, so no other append lands inside a batch — and
// keeps at most MaxBatchMessages messages in flight (the producer's
// MaxPendingMessages; a larger batch is handed over as receipts make
// room). It answers a batch once the producer's callbacks reported every
// message it handed over. A second goroutine flushes the producer's batch
// whenever something was sent since the last flush began, so a lone append
// does not wait for the batching delay while later appends keep flowing
// into the next batch. Producer batching stays on: with DisableBatching a
// producer that reconnects while sending trips the race detector inside
// pulsar-client-go v0.19.0 (grabCnx writes producerName/encryptor while
// internalSingleSend reads them).
//
// AppendBatchAsync (walimpls.AsyncAppender) queues its batch the same way
// and returns; the goroutine answers it as it answers a waiting caller. As
// the WAL closes, that goroutine answers every batch it took: those with
// messages in flight with ErrClosed (their outcome unknown), the others as
// not stored; a batch it never took is answered as not stored too.
//
// The producer keeps send order on its connection and resends pending
// entries in order after a reconnect, and the broker stores them in
// order, so a batch's IDs increase in slice order.
//
// After a dropped connection or a SEND_ERROR the client reconnects and
// resends its pending messages. A receipt lost with its connection makes the
// client resend a message the broker stored: enable deduplication on the
// namespace (brokerDeduplicationEnabled / set-deduplication) for exactly-once
// appends; without it such a message can be stored twice (readers then see
// two IDs for one append).
//
// # Batches are not atomic
//
// Capabilities.AtomicBatch is false. The client groups messages into
// broker entries by itself, and an entry is atomic at the broker, but an
// AppendBatch cannot be pinned to one entry: the client cuts its batch
// container on its own timer (BatchingMaxPublishDelay), on a Flush whose
// command its event loop takes at a moment the caller cannot observe, and
// when the container reaches BatchingMaxMessages or BatchingMaxSize (128
// KiB by default); a message it refuses inside SendAsync leaves the
// messages before it in the container. Making even small batches atomic
// would mean one entry in flight at a time (no timer, and waiting for each
// flush's receipt before the next batch), a round trip per batch for every
// append; and a batch above the entry size limits could still not be
// atomic.
//
// Instead a batch stores a prefix of itself. Sizes are checked first: a
// message above Capabilities.MaxMessageBytes refuses the whole batch and
// nothing is sent. Once a message of a batch fails (the client reports it,
// or its producer is retired), nothing more of the batch is handed over,
// and the batch returns with the IDs of its leading messages whose receipts
// arrived and the error of the first message that was not stored, which
// tells the outcome of the rest:
//
//   - a send timeout, a producer fenced or taken away, a Close with
//     messages in flight: unknown. Messages after the first failure may be
//     stored (a timed-out message whose SEND the broker never got, then
//     later ones that a reconnected producer resent, even leave a gap), but
//     they are never reported;
//   - the client refusing a message as too large inside SendAsync (a node
//     whose Config.MaxMessageBytes is above the broker's): a
//     *walimpls.TooLargeError, NotStored, which is true of that message and
//     of the rest, none of which was handed over.
//
// A caller whose context ends while its batch is in flight returns the
// context's error, of unknown outcome, with no IDs; what was not handed over
// yet of its batch never is. A batch refused before any of its messages was
// handed over is NotStored as a whole (see Fencing).
//
// # Sizes
//
// The broker announces its maximum message size in its CONNECTED answer.
// The client does not expose it, so New asks once itself (one CONNECT over
// the service URL, with the configured token and TLS), unless
// Config.MaxMessageBytes is set. Capabilities.MaxMessageBytes is half of
// that size minus 16 KiB for metadata, property framing and the batch
// envelope: the client copies the properties of a batch's first message
// into the batch's metadata, so a message's properties travel twice, and
// a message of the declared size must fit whether its bytes are payload or
// properties (the adaptor splits larger messages). A larger Message.Size is
// a *walimpls.TooLargeError before anything is sent, and the client's own
// ErrMessageTooLarge maps to the same error.
//
// # Fencing
//
// The channel's producer uses the WaitForExclusive access mode: the broker
// grants it once no other producer holds the topic, and bumps the topic
// epoch. pulsar-client-go cannot request ExclusiveWithFencing (it sends any
// mode but Shared, Exclusive and WaitForExclusive as Shared; upstream issue
// apache/pulsar-client-go#931), so a newer owner cannot fence the older one
// by itself. Terms live in the meta topic instead, and a ReadWrite open at
// term T runs:
//
//  1. fold the meta topic; if a claim has a term above T, fail with a
//     *walimpls.FencedError (nobody is disturbed);
//  2. make sure the durable subscriptions exist; start the meta watcher
//     (below) right after the last record the fold of step 1 saw, so that
//     no claim written since escapes both; unless the watcher has already
//     seen a higher claim (then fail with a FencedError), append a claim
//     (T, a fresh nonce) to the meta topic;
//  3. create the WaitForExclusive producer on a dedicated client. While it
//     waits, the current owner's meta watcher sees the higher claim, fences
//     its own writer and closes its producer, and the broker grants the
//     topic to the waiting producer (epoch + 1). If access is not granted
//     within Config.TakeOverGrace (1s; an owner that is dead, hung,
//     partitioned from the meta topic or not streamwal), Config.TakeOver is
//     called, and again with a backoff up to 2s, until
//     Config.TakeOverTimeout: in production TakeOver is the
//     admin API's topic unload, which disconnects the owner's producer; when
//     it reconnects it presents the old topic epoch and the broker refuses
//     it with ProducerFenced. Without TakeOver the open waits for the owner
//     to leave and fails with a retryable error after TakeOverTimeout.
//     An open that a claim beats never disturbs the topic: every TakeOver
//     call is preceded by a fold of the meta topic that must show this
//     open's claim winning, and as soon as the open's watcher (or that
//     fold) sees a claim that beats it — a higher term, or a later claim of
//     T — the open gives up at once with a FencedError and leaves the
//     topic's holder alone. So when opens of T and T+1 race, the loser
//     never unloads the winner, whose producer and readers stay
//     undisturbed. Its waiting producer is withdrawn in the background by
//     closing its client, once that is safe: pulsar-client-go v0.19.0
//     cannot cancel a producer creation whose lookup runs after its client
//     closed (the lookup opens a fresh connection and the creation waits
//     on it for ever), so a creation younger than the client's own bounds
//     for lookups and connecting is left to finish by itself; if the
//     broker grants it the topic meanwhile, it is closed at once;
//  4. fold the meta topic again: the winner is the highest term, the last
//     claim among equal terms. If it is not this open's claim, close the
//     producer and fail with a FencedError: a higher (or later same-term)
//     open raced it and wins.
//
// A claim written between the fold before a TakeOver call and the call is
// not seen by it; its open's producer then queues behind the one that
// calls TakeOver (the broker grants waiting producers in order), so that
// open cannot have returned yet, and the unload disconnects the previous
// owner, not the winner.
//
// A writer is fenced for good, and every later Append and Truncate fails
// with the same FencedError (errors.Is(err, walimpls.ErrFenced)), when its
// meta watcher sees a claim of a higher term or a later claim of its own
// term (or a deletion, see Deleting a channel), when a fold of the meta
// topic (every Truncate makes one, below) shows another winner, or when
// the client fails its sends with
// ErrProducerFenced (the broker refused its reconnect) or ErrProducerClosed
// (what the client returns after it closed a fenced producer) and the meta
// topic shows another winner. If its own claim still wins, something that
// is not a winning streamwal open took the producer (a foreign exclusive
// producer, an unload by an operator): the writer drops the producer, fails
// that group with a retryable error and acquires a new producer (steps 3
// and 4) on the next append. Once Open(T) has returned, the topic's
// producer is T's: a lower-term writer's sends are either refused by epoch
// or never reach the broker, so none is acknowledged.
//
// An Append or AppendBatch refused before any of its messages was handed to
// the producer (the WAL closed or already fenced, its context done, no
// producer to be had) is marked walimpls.MarkNotStored; one that fails after
// that has the outcome described under Batches.
//
// # Reads
//
// A scanner is a pulsar Reader (a non-durable subscription) on the opener's
// shared client, with a receiver queue of ReadAheadBytes/4 KiB messages
// (10 to 1000). The client hands messages over one at a time, so the
// backend offers no batch scanner (walimpls.BatchReader). cursor.All starts at the recorded truncation point
// (inclusive), or at the earliest message; StartFrom(id) is inclusive,
// StartAfter(id) exclusive; cursor.Latest starts at the topic's end and
// counts the last message stored when Read returns as delivered. A start
// below the truncation point is ErrPositionGone from Read; so is a start
// whose entries the broker deleted (the broker refuses the reader). A
// running scanner whose next message lies below the truncation point known
// to its WAL (a truncation overtook it) ends with ErrPositionGone, after
// what it had already handed to its channel (at most its receiver queue
// size in messages): the broker may keep such entries until retention
// runs, but they are never delivered after the truncation is known.
//
// cursor.Tail(n) asks the broker for the last message id first (as Last
// does), then takes the truncation point, and starts without reading
// anything: GET_LAST_MESSAGE_ID names the last message by its batch index,
// so the last entry holds that index + 1 messages, and every entry before
// it at least one (entries are consecutive within a ledger, a batch is
// never empty, and this backend's producers do not chunk). A tail within
// the last entry starts at the exact batch index; a longer one at the first
// message of the entry as many entries back as messages are still missing
// (exact when the entries hold one message each, earlier when appends
// shared entries). When the ledger of the last message holds fewer entries
// than that (the topic was reloaded or rolled its ledger shortly before the
// last appends), the ledgers before it cannot be found from the client:
// ledger ids are not consecutive, and the protocol names no ledger's last
// entry. The scanner then starts where cursor.All does, which delivers
// every message kept and costs a read of the whole log. A start that would
// lie below the truncation point starts at it instead (never at a removed
// position). Appends made between the request and the reader's creation
// are delivered too.
//
// pulsar-client-go v0.19.0 loses messages when a reader reconnects with a
// backlog (after an unload or a dropped connection): it resumes after the
// first message still in its receive queue, and the message its dispatcher
// goroutine holds is dropped. The scanner therefore checks every message
// against the last one it delivered: the next index of the same batch
// (batch sizes are known from the client), else the first message of the
// next entry of the same ledger, or of entry 0 of a later ledger. Anything
// else is a gap: the scanner reopens its reader right after the last
// delivered message, and accepts the message only if a fresh reader delivers
// it again (a genuine jump, or a position beyond the end), or ends with
// ErrPositionGone if the broker deleted what lies between. Duplicates (a
// reconnected reader restarting too early) are dropped. Before the first
// delivery the scanner expects the start position itself (StartFrom,
// Tail), its successor (StartAfter, Latest) or an entry 0 (cursor.All from
// the earliest), and verifies anything else the same way.
//
// # Truncate and Last
//
// Truncate(id) first folds the meta topic: if another claim wins, the
// writer is fenced and Truncate fails with its FencedError, removing
// nothing, even when the writer's meta watcher has not seen that claim yet
// (a Truncate that starts after the winner's Open returned always sees its
// claim). It then checks id against the topic's last message id (beyond it
// is ErrInvalidPosition), appends a truncation record to the meta topic (from
// then on a read below id is ErrPositionGone on this WAL, on WALs whose meta
// watcher sees the record, and on every WAL opened later), then acknowledges
// cumulatively, on the durable subscription, every entry before the one
// holding id, so that the broker's retention may delete them. The entry
// holding id is kept whole; the first entry of a ledger leaves the earlier
// ledgers to the next truncation.
//
// Last asks the broker for the log topic's last message id
// (GET_LAST_MESSAGE_ID) through a short-lived reader of the opener's shared
// client, on read-only and fenced WALs alike. The broker names the last
// message of a batch entry by its batch index (number of messages - 1), so
// Last is the ID its append returned; a topic without messages (entry -1)
// or without existence gives the zero ID, and an unload, which moves the
// topic to an empty ledger, or a truncation leave it unchanged. The
// client's calls take no context: the request runs on a goroutine the
// opener waits for on Close, and Last returns when its context ends. The
// client reports batch index 0 for a message sent without batching; this
// backend's producers always batch, so that is exact for what it writes.
//
// # Read-only opens
//
// A ReadOnly open creates nothing: with Config.TopicExists (or AdminURL)
// it asks whether the channel's meta topic exists first, and one that does
// not (a channel never opened ReadWrite, or deleted) is
// walimpls.ErrNoChannel, before any reader of the topic would make a
// broker that creates topics on use create it. Without either the backend
// cannot tell without creating: configure AdminURL, or turn the brokers'
// topic auto-creation off, where readers may open deleted channels.
//
// # Deleting a channel
//
// The binary protocol cannot delete a topic, so Opener.Delete needs
// Config.DeleteTopic or Config.AdminURL (the admin API's forced delete);
// without either it fails with an error matching walimpls.ErrInvalidConfig
// that says so. Config.TopicExists (AdminURL: a GET of the topic's stats)
// tells it whether the topics exist without creating them. Delete(name)
// runs:
//
//  1. finish this opener's WALs of the channel: their scanners end with
//     ErrPositionGone and close their readers, their meta watchers stop,
//     and their writers are fenced for good with a *walimpls.FencedError
//     with Deleted set, which closes their producers. Every later Append,
//     AppendBatch and Truncate fails with it (marked NotStored when
//     nothing was handed over), and Read and Last fail with
//     ErrPositionGone: nothing of these WALs touches the topics again;
//  2. ask TopicExists about both topics. When neither exists, return:
//     nothing was created or changed. Without TopicExists both are assumed
//     to exist, and a broker that creates topics on use creates them in
//     steps 3 and 4, for step 5 to delete;
//  3. append a deletion record to the meta topic: a claim of the highest
//     term, marked deleted, after which the fold counts no claim. A meta
//     watcher that sees it closes its reader and finishes its WAL as in
//     step 1, so the writer of another node closes its producer within a
//     round trip or two; every fold of the meta topic fails a writer's
//     claim check with Deleted from now on (a Truncate, a re-acquisition,
//     the check of a producer the broker closed), and every Open fails
//     with it while the record is there;
//  4. acquire the log topic as an open does (Fencing, step 3): a
//     WaitForExclusive producer on a dedicated client, Config.TakeOver
//     once TakeOverGrace passed without access (an owner whose watcher is
//     hung or cut off), until TakeOverTimeout or the end of the context.
//     The grant bumps the topic epoch, so the previous owner's producer,
//     if it was unloaded rather than closed, is refused with
//     ProducerFenced when its client comes back, and the client gives it
//     up. After an unload the topic is kept TakeOverGrace longer, so that
//     a live client, which reconnects at once, meets the topic and its
//     epoch rather than no topic (see below). Delete's producer sends
//     nothing and never reconnects; it holds the topic until step 5 has
//     deleted it, so that the producers still waiting for the topic (a
//     concurrent Delete's, a fenced writer's withdrawn one) are refused by
//     the delete rather than granted a moment before it closes them. A
//     Delete whose waiting producer is refused that way (TopicNotFound)
//     leaves the log topic alone: the Delete that held it deleted it;
//  5. delete the log topic, then the meta topic. Until the meta topic
//     goes, its deletion record keeps the channel fenced: a Delete that
//     fails or whose context ends after step 3 leaves a channel nobody can
//     write to or open, and calling Delete again finishes it.
//
// Why a writer of the deleted channel never stores again. A writer stores
// only through a producer of its own acquisition, which checks after the
// grant that its claim wins a fold of the meta topic. A fold that lacks
// the writer's claim — the meta topic is gone, or was created anew, by a
// later Open or by a read, and holds other claims or none — or that ends
// in a deletion record fences the writer for good with Deleted set. So it
// never acquires a producer again, neither of the deleted topics nor of
// topics a later Open creates under the same name. The producer it held
// when Delete began is gone before step 5: the writer closed it (step 3),
// or it was unloaded and refused by epoch (step 4). Several Deletes of one
// channel at once all succeed: one holds the log topic and deletes it,
// the others are refused while they wait, and each deletes the meta
// topic or finds it gone. A later Open of the name finds an empty meta topic:
// any term opens it, and the new log topic is empty (Last is the zero ID).
//
// What production needs, and what is left:
//
//   - AdminURL with a token whose role administers the tenant (Pulsar lets
//     only tenant admins unload and delete topics), or hooks that do the
//     same.
//   - With topic auto-creation on (Pulsar's default), a client that comes
//     back to a deleted topic creates it again, empty. The readers of
//     other nodes are the caller's to stop first: their scanners end
//     when their meta watcher sees the deletion record, but one that the
//     delete disconnects first re-creates the log topic (and, if it was
//     delivering, may trip the client's race between Reader.Next and a
//     reconnect, below). A stale writer's
//     claim check re-creates an empty meta topic (and fails as deleted).
//     The broker's inactive-topic cleanup removes such empty topics. The
//     case that matters is a producer unloaded in step 4 whose client
//     comes back only after step 5 (its process hung, or cut off from the
//     broker, for longer than TakeOverGrace, and its meta watcher with
//     it): it is granted on the re-created topic with the epoch it
//     brought, resends what it had pending, and its writer, which learns
//     nothing, may go on appending there. A later Open's take-over unloads
//     it and refuses it by epoch, but what it stored first lies at the
//     start of the new channel. Disabling auto-creation on the namespace
//     (pulsar-admin namespaces set-auto-topic-creation --disable) closes
//     all of this: a client coming back to a deleted topic gets
//     TopicNotFound, and pulsar-client-go gives the producer up. Channels
//     must then be created with the admin API before their first open.
//   - IDs of the deleted channel mean nothing to the new one: a checkpoint
//     taken before Delete must not be used after it.
//
// # pulsar-client-go v0.19.0 behaviours this package works around
//
//   - Reader reconnects with a backlog skip messages (above).
//   - Reader.Next writes the consumer's lastDequeuedMsg while a reconnect
//     reads it on another goroutine: a data race the race detector reports
//     when a reader reconnects while it is delivering. Scanners use
//     Reader.Next anyway (it is the only way to read with a start message
//     id); the fencing design keeps readers from reconnecting in the normal
//     take-over (the owner releases the topic itself, no unload, and an
//     open that lost never unloads the winner), and the tests only unload
//     or drop connections while readers are idle - but for the test of
//     dropped connections during appends, whose meta watcher may be
//     delivering its own claim: it runs without the race detector.
//   - DisableBatching producers race on reconnect (above): batching stays on.
//   - A client closed while one of its producer creations is still looking
//     the topic up serves that lookup on a fresh connection, which nothing
//     closes: the creation can no longer be cancelled, and a
//     WaitForExclusive producer then waits for the topic for ever. Waiting
//     producers are withdrawn only once their creation is past that stage
//     (see Fencing, step 3).
//   - Closing a producer closes its channels under a concurrent SendAsync or
//     Flush (a send on a closed channel panics), and a message still in the
//     batch when the producer closes never gets its callback. Only the
//     writer goroutine sends and closes; the flusher flushes under a read
//     lock that closing takes for writing; closing a producer answers every
//     append it had not answered. The client still closes a producer by
//     itself after ProducerFenced on a reconnect; a SendAsync racing that
//     close could hit the client's panic (never seen in the tests: the
//     writer is usually fenced by its meta watcher first).
//   - A producer closed by fencing leaks its reconnect goroutine
//     (runEventsLoop.func1); the send-timeout goroutine (failTimeoutMessages)
//     lingers up to SendTimeout after Close; a consumer closed while a
//     reconnect races it may leave grabConn.func1 blocked. Meta producers
//     run without a send timeout so that nothing of them lingers.
//   - Seek to EarliestMessageID fails; scanners never seek, they reopen.
//   - A producer that the broker closes (a forced delete, an unload) while
//     its creation is finishing trips the race detector (newPartitionProducer
//     writes its logger while the connection's CLOSE_PRODUCER handler reads
//     it). Delete holds the log topic while it deletes it, so that waiting
//     producers are refused rather than granted and closed at once; a
//     deletion record that one Delete writes while another deletes the
//     meta topic can still meet it (concurrent Deletes of one channel; the
//     tests order them).
//
// # Known limits
//
//   - cursor.Tail(n) reads the whole kept log when the ledger of the last
//     message has fewer than about n entries (see Reads): right after a
//     topic reload or a ledger rollover followed by only a few appends.
//   - The meta topic grows by one small record per ReadWrite open and per
//     Truncate that advances the point, and every open and every Truncate
//     reads it whole.
//   - A read-only WAL learns truncations made elsewhere from its meta
//     watcher; a record its watcher has not received yet is not enforced.
//   - A Java broker moves a reader whose start was deleted by retention to
//     the first entry left instead of refusing it; past the recorded
//     truncation point only retention settings that delete unacknowledged
//     messages can cause that, and the namespace must not have them.
package pulsar
