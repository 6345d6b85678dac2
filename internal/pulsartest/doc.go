// Package pulsartest is an in-memory Pulsar broker that speaks the Pulsar
// binary protocol over loopback, for testing code built on the unmodified
// pulsar-client-go (v0.19.0) without a Java broker.
//
//	b := pulsartest.Start(t, pulsartest.Config{}) // or New(Config) + Close
//	client, _ := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL()})
//
// # Wire format
//
// Every frame starts with its size, then the command:
//
//	[total size u32 BE][command size u32 BE][BaseCommand protobuf]
//
// total = 4 + command size, unless a payload follows. SEND (client) and
// MESSAGE (broker) carry one:
//
//	... [0x0e01 u16][CRC32-C u32][metadata size u32][MessageMetadata][payload]
//	                 '---- checksum covers everything after itself ----'
//
// total then also counts the payload bytes. The broker verifies magic and
// CRC32-C (Castagnoli) of every SEND. A checksum mismatch is answered, as
// Pulsar's Producer.checkAndStartPublish does, with SEND_ERROR
// (ChecksumError, the SEND's highest sequence id): that message is not
// stored, the producer stays, and the SENDs after it are served, so a client
// may resend it on the same connection (pulsar-client-go closes the
// connection instead and resends after reconnecting). A payload without the
// magic number or with metadata that does not fit is answered with
// SEND_ERROR (UnknownError) and breaks the producer registration (below).
// A frame above MaxMessageSize +
// 10 KiB, a frame that does not parse, or any command before CONNECT closes
// the connection.
//
// Entries are opaque: the bytes from the magic number to the end of the
// payload are stored exactly as received, one SEND = one entry, and replayed
// unchanged in MESSAGE, so the client verifies the same checksum and unbatches
// a batch itself. The broker reads one field of the metadata with protowire:
// num_messages_in_batch (11), for the permits an entry costs (its number of
// messages) and for GET_LAST_MESSAGE_ID's batch_index (n-1 for a batch, -1
// for a plain message).
//
// # Protocol messages
//
// The broker does not carry its own copy of PulsarApi.proto. pulsar-client-go
// registers the descriptors of its generated package (pulsar.proto) in the
// global protobuf registry, and this package links the client in (a blank
// import) and drives those message types through protoreflect by field name
// (dynamicpb over the registered file descriptor if the Go types were ever
// missing). No generated code, no protoc. BaseCommand's sub-message for type
// N is field number N in PulsarApi.proto; newSchema checks this for every
// type used. Commands are marshalled with required-field checks on.
//
// # Positions
//
// A position is (ledger id, entry id), ordered by ledger then entry. A topic
// appends to its current ledger; UnloadTopic moves it to a new ledger (ledger
// ids are unique and increasing within a broker), as a real topic reload
// does. Start message ids from the client: Earliest is {-1, -1} (sent as
// uint64 max), Latest is {MaxInt64, MaxInt64}. Any other start id is
// inclusive at the broker (dispatch begins at that entry); the client drops
// what is at or before it unless the reader asked for an inclusive start.
//
// # Commands
//
// Supported: CONNECT/CONNECTED, PING/PONG, PARTITIONED_METADATA (always a
// non-partitioned topic), LOOKUP (answer: Connect to this broker,
// authoritative), PRODUCER, SEND/SEND_RECEIPT/SEND_ERROR, CLOSE_PRODUCER,
// SUBSCRIBE (Exclusive only: readers, i.e. non-durable subscriptions with a
// start message id, and durable subscriptions with a cursor), FLOW/MESSAGE,
// ACK (individual and cumulative; ACK_RESPONSE when a request id is given),
// REDELIVER_UNACKNOWLEDGED_MESSAGES (durable: rewind to the cursor), SEEK by
// message id (SUCCESS, then CLOSE_CONSUMER so that the client resubscribes
// from the sought id), GET_LAST_MESSAGE_ID, CLOSE_CONSUMER, UNSUBSCRIBE.
//
// Anything else that carries a request id gets ERROR (NotAllowedError,
// "pulsartest: command X is not supported"): schemas, transactions, seek by
// publish time, topic lists, consumer stats, auth challenges. A command the
// broker does not support and cannot answer closes the connection. Shared,
// Failover and Key_Shared subscriptions are refused with ERROR.
//
// Producer access modes follow the Pulsar broker: Shared is refused
// (ProducerBusy) while an exclusive producer or a WaitForExclusive waiter
// exists; Exclusive is refused (ProducerFenced) while any producer exists,
// else granted with the topic epoch bumped (kept when the producer comes
// back with the current epoch); WaitForExclusive gets PRODUCER_SUCCESS with
// producer_ready=false, waits in line and is granted with epoch+1 when the
// topic has no producer left. An Exclusive or WaitForExclusive producer
// presenting a topic epoch below the topic's is refused with ProducerFenced:
// the client then closes the producer (pending sends fail with
// ErrProducerFenced, later ones with ErrProducerClosed). A producer name is
// generated when the client gives none; a second producer with a name in use
// gets ProducerBusy (retryable) unless the first one's connection is already
// gone, in which case the stale registration is dropped.
//
// SENDs are answered in order on their connection. A SEND for a producer the
// broker closed (unload), failed (a SEND_ERROR other than ChecksumError) or
// has not granted is dropped without answer: the client resends all pending
// messages after it reconnects. With Config.Deduplication a resent message whose sequence id
// was already persisted for that producer name is not stored again.
//
// # Deleting topics and the admin API
//
// The binary protocol cannot delete a topic; Broker.DeleteTopic does what
// Pulsar's forced delete does. The broker sends CLOSE_PRODUCER to every
// granted producer and CLOSE_CONSUMER to every consumer of the topic,
// answers the queued WaitForExclusive producers with ERROR TopicNotFound,
// and forgets the topic: entries, durable subscriptions, topic epoch and
// deduplication state. The closed clients reconnect. With auto-creation
// on, the first to come back creates the topic again, empty, on a new
// ledger; an exclusive producer presenting its old topic epoch is granted
// there (the new topic has none to compare with) and resends what it had
// pending, as against a Pulsar broker. With DisableAutoTopicCreation they
// get TopicNotFound, and pulsar-client-go gives a producer up for good.
// TopicExists tells whether a topic exists without creating it.
//
// With Config.ServeAdmin the broker also serves a minimal admin REST API
// on another loopback port (Broker.AdminURL): PUT .../unload, DELETE
// (?force=true for a topic in use) and GET .../stats of
// /admin/v2/persistent/{tenant}/{namespace}/{topic}, answering 204 (200
// for stats), 404 for a topic it does not have, 412 for a non-forced
// delete of a topic in use, and 401 without the Config.AdminToken bearer
// token when one is set. See admin.go.
//
// Fault hooks: InjectSendError answers SEND_ERROR (the client reconnects and
// resends), DelayReceipts holds receipts back (on Config.Clock: with a fake
// clock, until the test advances it), and StallSends makes a topic stop
// storing and answering SENDs, so that only the client's SendTimeout fails
// them, after a chosen number of stored SENDs. Stats reports what tests wait
// on instead of sleeping: entries stored, producers granted and waiting,
// refused as fenced, and closed by the client after that refusal.
//
// # Retention and trimming
//
// TrimTopic deletes entries below a position; ApplyRetention deletes the
// entries at or below the slowest durable cursor (nothing without durable
// subscriptions). Durable cursors below the deleted range move up to it;
// readers already past the deleted range skip to the first entry left, as
// in Pulsar. A reader that subscribes or seeks to a position before a
// deleted entry is refused with ERROR NotAllowedError whose message starts
// with GoneMessage; CreateReader and Seek return it. A start exactly at the
// last deleted entry is allowed: an exclusive reader needs nothing deleted
// (an inclusive one would miss that entry; the broker cannot tell which it
// is). GET_LAST_MESSAGE_ID keeps reporting the last entry written even when
// it was deleted, so HasNext on a fully trimmed topic reports true with
// nothing left to read.
//
// # Concurrency
//
// One goroutine (Broker.run) owns all broker state: topics, entries,
// producers, subscriptions, connections. Each connection has a reader
// goroutine (frames → decoded commands → the loop) and a writer goroutine
// (drains the connection's queue, guarded by conn.mu). The acceptor, the
// loop, every connection goroutine and the admin server's are counted in
// Broker.wg; Close closes the listeners and all connections and waits for
// all of them (admin requests hand their work to the loop like hooks, and
// their connections close after each response). Hooks
// run their work on the loop goroutine and wait for it.
//
// # Known pulsar-client-go v0.19.0 behaviours met while testing
//
//   - With DisableBatching, a producer that reconnects while sending trips
//     the race detector (grabCnx writes producerName/encryptor while
//     internalSingleSend reads them); batching producers do not.
//   - A reader (or consumer) that reconnects with a backlog resumes after the
//     first message still in its receive queue, but the message its
//     dispatcher goroutine already holds is dropped: one entry (or the rest
//     of a batch) is skipped. Code that must not miss messages across
//     reconnects has to detect the gap itself and seek back.
//   - A producer closed by fencing leaks its reconnect goroutine; a consumer
//     closed after Unsubscribe leaks its goroutines; the send-timeout
//     goroutine lingers up to SendTimeout after Close.
//   - Seek to EarliestMessageID fails in the client ("seek msgId must include
//     partitoinIndex"); seek to a real message id instead.
package pulsartest
