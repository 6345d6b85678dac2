// Package kafka is the Kafka backend of streamwal, built on franz-go.
//
// # Layout
//
// Each channel is one topic, named TopicPrefix + channel name, created on
// open through the admin API when missing (Config.Partitions,
// ReplicationFactor, TopicConfigs; retention is off by default so that only
// Truncate removes messages). The topic has at least two partitions:
//
//	partition 0  the log: one record per message
//	             value   = payload (nil stays null, empty stays empty)
//	             key     = null
//	             headers = every property, reserved "_" keys included,
//	                       byte for byte, in sorted key order
//	             MessageID = the record's offset (message.SeqID "kafka",
//	                       marshalled as a decimal string)
//	partition 1  term claims, produced without a transaction
//	             key     = "streamwal.claim"
//	             value   = "swc1" | term int64 big-endian | nonce [16]byte
//	             deletion marker (see "Deleting a channel"): a claim of
//	             term 2^63-1 whose nonce is "streamwal-delete"
//
// Offsets in partition 0 are not dense: transaction markers and aborted
// records take offsets too. IDs still strictly increase in append order.
//
// # Appends
//
// Append is AppendBatch of one message: one path for both. Every message of
// a batch is checked against the size limit (see Sizes) before anything is
// produced; one above it refuses the whole batch.
//
// With transactions (the default), every ReadWrite WAL owns one transactional
// producer whose transactional.id is TransactionalIDPrefix + channel name.
// An Append or an AppendBatch is one request to the writer goroutine, which
// is never split. The writer takes the requests queued while the previous
// transaction was in flight, whole and in order, while their records stay
// within MaxBatchRecords and MaxBatchBytes (a request that would exceed them
// waits for the next transaction), and writes them as one transaction:
// BeginTransaction, the records of each request in slice order,
// EndTransaction. They all commit or none does, and every request in the
// transaction gets the same answer. A batch is therefore stored whole or not
// at all (Capabilities.AtomicBatch), also when the writer dies mid-batch:
// its open transaction is aborted by the next owner's producer
// initialisation or by TransactionTimeout, and read_committed readers never
// see a part of it.
//
// A batch larger than MaxBatchRecords or MaxBatchBytes is not refused: it
// gets a transaction of its own. Kafka bounds neither the records nor the
// bytes of a transaction; the client splits it into record batches of at
// most the broker's limit and as many produce requests as needed. What
// bounds it is time: the transaction must be written and committed within
// TransactionTimeout (the broker aborts a transaction open longer, and the
// batch fails whole) and each record acknowledged within DeliveryTimeout.
// A batch the broker cannot take in a fraction of TransactionTimeout should
// be split by the caller.
//
// A transaction costs two round trips more than a plain produce
// (AddPartitionsToTxn, and EndTxn, which writes the markers), so one
// sequential appender pays about three round trips per append, while
// concurrent appenders share them. Readers use read_committed and never see
// aborted records.
//
// The transactional client is held below KIP-890 part 2 (Produce v11, EndTxn
// v4), whose one-round-trip-cheaper path let franz-go v1.22.3 end a
// transaction with an abort while reporting its commit as done: an
// acknowledged record lost (see pre890p2Versions and TestFreshWritersCommit).
// On the older path the same version sometimes returns from a commit without
// sending EndTxn at all (again the first transaction of a fresh client): the
// records stay in an open transaction that the broker aborts on timeout, and
// read_committed readers stall behind it. The writer counts the EndTxn
// requests its client writes; when a commit wrote none it sends the EndTxn
// itself and replaces the client, whose idea of the partitions in the
// transaction is then wrong (see txnWriter.commitOpenTxn); it logs a warning.
//
// With DisableTransactions, appends go straight to an idempotent producer,
// which batches concurrent appends itself. It cannot be fenced, and the
// backend declares Capabilities.Fencing false (see "Without transactions").
// A batch is produced in slice order, and the producer keeps the order of a
// partition's records, so its IDs increase in slice order (a concurrent
// append may land between them). It is not atomic (Capabilities.AtomicBatch
// false): the client answers a partition's records in order, and on a
// failure AppendBatch returns the IDs of the records acknowledged before
// the first failed one, a prefix known to be stored, with the error. The
// error leaves the rest's outcome unknown: when the broker refuses a record
// batch, the client fails every record it buffers for the partition with
// that error, including batches already sent, which the broker may store.
//
// A produce retried after an ambiguous failure (a timeout after the broker
// applied it, a dropped connection) is deduplicated by the broker through
// the producer's sequence numbers, so readers see one copy. An EndTxn whose
// outcome is unknown makes the appends fail with a retryable error: they may
// or may not be stored, as with a cancelled Append.
//
// AppendBatchAsync (walimpls.AsyncAppender) takes the same path without a
// caller waiting on it: with transactions it queues the request for the
// writer goroutine and returns (it blocks only while MaxBatchRecords
// requests are queued already), and the writer answers it as it answers a
// waiting caller; without, it hands the records to the client, and the
// last record's promise answers. Requests the writer never took when the
// WAL closes are answered as not stored. So a caller with many appends in
// flight needs no goroutine per append, and calls that follow each other
// are stored in call order (one queue, one producer).
//
// An Append or AppendBatch refused before any of its records reached the
// broker fails with an error marked walimpls.MarkNotStored
// (walimpls.NotStored reports true): on a closed WAL, on a WAL that knows
// it is fenced (an empty batch included), with a context done before the
// records were handed to the producer, when the WAL closes before the
// writer took the request, and when the writer could not even start the
// transaction (acquiring a producer, BeginTransaction) for a group of
// requests none of whose records had been produced before. Every failure
// after the records were produced stays unmarked, even when the transaction
// was never committed; so does a fence learnt from a produce or a commit in
// flight. An empty batch on a writable WAL stores nothing and succeeds.
//
// # Sizes
//
// The broker limits the size of a record batch (message.max.bytes, or the
// topic's max.message.bytes). Capabilities.MaxMessageBytes declares that
// limit minus 349 bytes: the batch header (61), the record's varints (32)
// and an allowance for the header length varints (256). A message whose
// Message.Size is above the declared limit, or whose exact framed size is
// above the broker's limit, fails its Append, or its whole AppendBatch,
// with a *walimpls.TooLargeError before anything is sent. A broker
// MESSAGE_TOO_LARGE (a broker whose limit is below the one this node
// learnt or was configured with) is mapped to the same error, naming the
// largest refused message: with transactions it aborts the transaction, so
// the refused requests stored nothing (the others in it fail with a
// retryable error); without, the client fails the refused record batch's
// neighbours with it too, and the error is marked
// walimpls.MarkOutcomeUnknown.
// Compression is off: WAL payloads are usually already compact, and the
// limit is checked on the uncompressed size.
//
// # Fencing
//
// Kafka fences a transactional producer when another producer initialises
// the same transactional.id: InitProducerID bumps the epoch and aborts the
// older producer's open transaction, whose later produce, commit and abort
// fail with INVALID_PRODUCER_EPOCH or PRODUCER_FENCED. That stops a stale
// writer, but it cannot tell a higher term from a lower one: whoever
// initialises last wins. The terms therefore live in Kafka too, as claims in
// partition 1, and a ReadWrite open at term T runs:
//
//  1. read every claim; if one has a term above T, fail with a
//     *walimpls.FencedError (nobody is disturbed);
//  2. append a claim (T, a fresh random nonce);
//  3. create the transactional producer and initialise its producer id: this
//     fences every older producer of the channel;
//  4. read the claims again; the winner is the claim with the highest term,
//     the last written among equal terms. If it is not ours, close the
//     producer and fail with a FencedError: a higher (or later same-term)
//     open raced us, and it wins;
//  5. delete the claims before ours (they can never win again), so that
//     partition 1 stays a few records long.
//
// The later claim wins at the same term too: a ReadWrite open at the term
// the channel's owner holds writes a claim after the owner's, which then
// loses, and its producer initialisation fences the owner's producer. So a
// node that restarts with its term takes the channel back from its previous
// incarnation; the FencedError of the earlier writer then has CurrentTerm
// equal to Term.
//
// A writer whose append fails with a fencing error reads the claims: if a
// claim other than its own wins, it is fenced for good and every later
// Append and Truncate fails with the same FencedError (errors.Is(err,
// walimpls.ErrFenced)). So it is when the deletion marker wins, when the
// claims are empty, and when the topic is gone or exists under another
// topic ID than the WAL opened (a re-created topic): the channel was
// deleted, and the FencedError has Deleted set. If its own claim still wins, the producer was fenced
// by a concurrent open of a lower term that lost in step 4 and gives up; the
// writer then re-acquires its producer (steps 3 and 4) on the next append
// and fails only the batch in flight, with a retryable error. Every producer
// initialisation is followed by a claim check before it appends, so once
// Open(T) has returned no writer of a lower term, nor an earlier open of
// T, commits another append. The
// price is two claim reads and one claim write per ReadWrite open, and
// producer fencing only works if every node uses the same
// TransactionalIDPrefix and TopicPrefix.
//
// Truncate is not a produce, so the producer epoch does not stop it:
// DeleteRecords has no condition Kafka could check. A writer therefore reads
// the claims right before it deletes, and when its claim no longer wins it
// is fenced (for good, as above) and deletes nothing. A Truncate that starts
// after a higher or later same-term Open returned always sees that open's
// claim (written, and acknowledged, before the producer initialisation) and
// is refused. One window remains: a Truncate whose claim check ran before
// the new owner wrote its claim may still delete after the new owner's Open
// returned, if its DeleteRecords reaches the broker later than the new
// owner's remaining open steps (a producer initialisation and a claim read,
// several round trips). The backend bounds that call by RequestTimeout, so
// the stale deletion lands at most that long after the check (plus however
// long the broker takes to serve a request already sent). It removes only
// the messages before the position the stale owner chose, never the last
// message; the layers above should truncate only what every reader, the
// next owner included, no longer needs.
//
// # Without transactions
//
// With DisableTransactions the backend cannot fence and says so
// (Capabilities.Fencing false). It then neither reads nor writes claims: a
// ReadWrite open is accepted at any term, a lower one included, and fences
// nobody; Append and Truncate never fail with ErrFenced. Two writers of one
// channel both append, and readers see the appends of both: they are
// protected by the adaptor's log-level fence (the term-begin message each
// owner writes) alone, as for every backend without fencing. Every node of
// a deployment must use the same DisableTransactions: a transactional
// writer is not stopped by a writer without transactions, nor does it see
// its term.
//
// # Deleting a channel
//
// Opener.Delete(name) runs, bounded by its context and CreateTimeout:
//
//  1. It finishes this opener's WALs of the channel: from then on their
//     Append, AppendBatch and Truncate fail with a FencedError with
//     Deleted set (marked walimpls.MarkNotStored when nothing was handed
//     to the broker; an append in flight fails when the fence below
//     reaches it), their scanners end with walimpls.ErrPositionGone, and
//     Read and Last fail with it.
//  2. It asks the cluster (not franz-go's metadata cache) whether the topic
//     exists. A channel that was never created, or is deleted already, is
//     deleted: nothing is created, neither the topic nor the transactional
//     id (the request never asks for automatic topic creation).
//  3. With transactions it fences the channel's writers on every node, the
//     way an open does (claim, then own): it writes the deletion marker to
//     the claim partition, then initialises the channel's transactional id.
//     The epoch bump fences every producer initialised before it and aborts
//     its open transaction. A producer initialised after it is followed by
//     a claim check that the marker, which wins over every claim, fails:
//     the writer closes it unused and is fenced for good. So no writer of
//     the channel commits a transaction after Delete returns, neither in
//     the deleted topic nor in a topic created later under the same name
//     (whose claims hold no claim of theirs, and whose ID is not the one
//     they opened). A node running an older version, which does not know
//     the marker, sees a claim of a term above its own.
//  4. It deletes the topic (DeleteTopics; a topic that does not exist is
//     success) and waits until no broker it can reach lists the topic in
//     its metadata any more, then drops the topic from its client. An Open
//     after Delete returns therefore creates a new, empty topic, on any
//     node: ensureTopic reads the metadata from the cluster, and an opener
//     whose client still holds the old topic (franz-go pins a topic's ID
//     and refuses a re-created one until it is purged) purges it when it
//     sees the new ID.
//
// Without transactions (Capabilities.Fencing false) steps 1, 2 and 4 run.
// Nothing stops the writers of other nodes: they fail once the topic is
// gone, but the layers above must stop them before deleting, as the
// contract says for backends without fencing.
//
// Cost: a metadata request, a claim write, a producer initialisation
// (FindCoordinator and InitProducerID, which waits while the coordinator
// aborts an open transaction of the channel), DeleteTopics, and one
// metadata request per broker until the deletion shows; on kfake a Delete
// takes a few tens of milliseconds. Delete needs, besides what a writer
// needs (Describe and Write on the topic, Write on the transactional id),
// Delete on the topic, and delete.topic.enable on the brokers.
//
// Deletion is asynchronous on a real cluster: DeleteTopics returns once
// the controller accepted it, brokers drop the topic from their metadata
// shortly after (a ZooKeeper-based cluster may keep it "marked for
// deletion" much longer), and the log segments are removed later still
// (file.delete.delay.ms). Delete waits for the metadata only. A broker it
// cannot reach is not waited for; a ReadWrite open that still finds the
// dying topic sees the deletion marker, waits for the topic to go (up to
// CreateTimeout, at most three times) and creates a new one. A ReadOnly
// open reads no claims and creates no topic: one that finds the dying
// topic reads the deleted channel until the topic goes, one that finds
// none is walimpls.ErrNoChannel. Scanners of other nodes are the caller's
// to stop first; a scanner whose topic is gone or re-created ends with
// ErrPositionGone.
//
// The transactional id survives the deletion with its epoch: Kafka cannot
// delete one (it expires after transactional.id.expiration.ms unused). A
// writer of the new channel initialises it again at a higher epoch, which
// is harmless.
//
// A Delete that fails after step 3 (the cluster refused the topic
// deletion, say) leaves the channel fenced: writers are finished, and a
// ReadWrite open waits for the topic to go and then fails, until a Delete
// succeeds.
//
// One case is outside what the backend can stop: a produce of a fenced
// writer that franz-go was still retrying when the topic went could, on
// brokers without transaction verification (before Kafka 3.6, KIP-890 part
// 1), reach the partition of a topic created again under the name, before
// the client noticed the new topic ID. It can never commit, so readers
// never see it, but like any open transaction it holds read_committed
// readers up. Kafka 3.6 and later refuse it.
//
// # Reads
//
// A scanner consumes partition 0 directly (no consumer group, no committed
// offsets) with its own franz-go client, read_committed, and fetches of at
// most ReadAheadBytes. cursor.All starts at the log start, cursor.Latest at
// the last stable offset when Read is called, StartFrom at the offset and
// StartAfter at the offset plus one. The client never resets an offset on
// its own (NoResetOffset): OFFSET_OUT_OF_RANGE below the log start ends the
// scanner with ErrPositionGone (Read itself checks the start first), and a
// position beyond the end is waited for. A batch scanner (ReadBatches)
// hands over the records of each fetch as one slice.
//
// cursor.Tail(n) cannot start at the last stable offset minus n: offsets
// are not message counts (a commit marker follows every transaction, aborted
// records take offsets and are never delivered). Read counts instead, with
// read_committed fetches of the scanner's client, the messages in windows of
// offsets backwards from the last stable offset it listed: the first window
// is 2n offsets wide (n appends of one message each with transactions fill
// exactly that; without transactions or with batches it holds more), each
// next one twice the last, until the windows hold n messages; the scanner
// starts at the lowest window's first offset. When a window would reach the
// log start, the scanner starts at the log start without reading further
// (it delivers every message kept, and a log shorter than 2n offsets is not
// read at all). What Read fetches is bounded by the offsets the last n
// messages span, never by the log's length, and a start is never below the
// log start. A scanner therefore delivers at least the last n messages,
// often a few more (up to about 2n without transactions, more after
// aborted transactions). Messages of a transaction acknowledged before Read
// whose commit markers were not written yet lie above the last stable
// offset; they are not counted, but are delivered, being above the start.
// A truncation that overtakes the search makes it look again from the new
// log start; one that overtakes the scanner after Read ends it with
// ErrPositionGone, as for any start.
//
// # Last
//
// Last is the offset of the last record a read_committed scanner delivers.
// The end of partition 0 is not it: a commit marker, aborted records and
// their abort marker may follow. Last lists the bounds of partition 0 and
// waits until the last stable offset reaches the high watermark it listed
// first: a transaction acknowledged before the call may still be writing
// its commit markers (Kafka answers EndTxn before the markers are written),
// and waiting for every transaction open at the call to end puts every
// acknowledged append below the last stable offset. A transaction of a
// writer that died holds Last up like it holds up scanners, until the next
// owner's producer initialisation or TransactionTimeout aborts it. Last then
// fetches (read_committed, so aborted records and markers are dropped)
// windows of offsets backwards from the last stable offset, 4 offsets
// first and each window 8 times the last, until one holds a record; none
// down to the log start means the channel never held a message (Truncate
// always keeps the last one), and Last is the zero ID. A truncation that
// overtakes the search makes it start again.
//
// # Truncate
//
// Truncate(id) is DeleteRecords of partition 0 before the offset just after
// the last message below id, not before id itself: the records between are
// markers and aborted records, and keeping them makes the log start one
// past the last removed message, so that StartAfter(that message) is valid
// and starts at id while StartFrom(it) is ErrPositionGone. An id with no
// message below it down to the log start is a no-op; an offset with no
// committed message at or after it is ErrInvalidPosition. A transactional
// writer reads the claims first (see Fencing).
package kafka
