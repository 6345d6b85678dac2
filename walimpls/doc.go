// Package walimpls is the contract between streamwal and its storage backends.
//
// A backend is a Builder (a name and a constructor) producing an Opener, which
// opens one WALImpl per channel. A WALImpl appends messages, reads them back
// through Scanners, and truncates its head. Backends only store, order and
// fence; timeticks, ordering of concurrent appends for readers, splitting of
// large messages, retries and metrics live in the layers above (the adaptor),
// so every backend stays small. Backends classify errors; they do not retry.
//
// This is version 2 of the contract. Every promise below is checked by the
// conformance suite in walimplstest; a backend that passes all of it works.
//
// The optional interfaces (Creator, BatchReader, AsyncAppender) are found
// by type assertion, so a method whose signature drifts silently drops
// one. A backend pins each one it implements with a compile-time
// assertion beside its type (var _ walimpls.BatchReader = (*wal)(nil)),
// and declares them to the suite (walimplstest.Implements), which fails
// when the declaration and the types disagree.
//
// # Storing and reading
//
//   - IDs returned by sequential appends of one writer strictly increase, also
//     across a Close and a reopen at the same or a higher term. IDs are unique
//     within a channel.
//   - Every acknowledged append is read back byte for byte (payload and every
//     property, reserved ones included) by every reader started before or after
//     it, until it is truncated.
//   - Append and AppendBatch do not keep the caller's messages: once they
//     return, the caller may reuse a message's payload bytes and its
//     properties map (message.Restore hands the map over), and what
//     readers get does not change. A backend stores copies
//     (message.Message.Copy), or encodes the message, before it returns.
//     A message's kind, term and timetick are held in its stamp, not its
//     map: a backend that encodes the stamp's binary form
//     (Message.AppendStamp, message.DecodeStamp) keeps no map for a
//     record that has no other properties; one that stores every
//     property as a string (Properties().Pairs) keeps them too.
//   - Scanners deliver messages in ID order, without gaps. A backend may
//     also offer batch scanners (BatchReader), which deliver the same
//     messages several per receive, in slices that belong to the receiver.
//   - A backend may offer asynchronous appends (AsyncAppender): a batch
//     handed over is answered later, through a callback, with what
//     AppendBatch would have returned; batches handed over one after the
//     other are stored in call order.
//   - AppendBatch stores a batch in slice order; a backend that declares
//     Capabilities.AtomicBatch stores it whole or not at all (memory: one
//     lock; local: one journal group that recovery keeps or drops whole;
//     Kafka with transactions: one transaction). A batch with a message
//     above the size limit stores nothing.
//   - Last returns the ID of the last message stored: every append
//     acknowledged before the call has an ID at or below it. It is the zero ID
//     only for a channel that never held a message (Truncate always keeps the
//     last message).
//
// # Terms and fencing
//
// A backend that declares Capabilities.Fencing stops stale writers itself:
//
//   - A ReadWrite open at term T succeeds when T is at least the channel's
//     highest term. From the moment it returns, every other ReadWrite WAL of
//     the channel opened earlier with a term ≤ T is fenced: lower terms, and
//     at the same term every earlier open. The later claim wins, on every
//     backend: a node that restarts with the term it held takes its channel
//     back from its own previous incarnation, which nobody could otherwise
//     stop. One term has one writer at a time.
//   - A ReadWrite open below the channel's highest term fails with an error
//     matching ErrFenced and changes nothing: it stores nothing and fences
//     nobody.
//   - A fenced WAL's Append and Truncate fail with an error matching
//     ErrFenced (a *FencedError) and store or remove nothing; so does every
//     later call. Its scanners and Last keep working: a stale owner may
//     still read.
//   - ReadOnly opens fence nobody, whatever their term, and create
//     nothing: a ReadOnly open of a channel that does not exist (never
//     opened ReadWrite, or deleted) fails with ErrNoChannel, so that a
//     reader never brings a deleted channel back (a Kafka or Pulsar topic
//     a broker would create on use, say).
//
// A backend without fencing (Capabilities.Fencing false) accepts every open
// and every append; readers are then protected by the adaptor's log-level
// fence alone (a term-begin message in the log).
//
// # Outcomes of a failed Append
//
// An Append that returns nil stored its message. An Append that returns an
// error either certainly stored nothing — NotStored(err) reports true — or
// has an unknown outcome: the message may have been stored and may be read
// later (a cancelled context, a dropped connection, a fence that raced a
// write in flight, ErrClosed from a Close during the call). NotStored is true
// for ErrTooLarge, ErrReadOnly, ErrInvalidChannel, ErrInvalidPosition,
// ErrInvalidConfig, and for every error a backend marked with MarkNotStored
// because it refused the message before handing it to storage (an append on
// a WAL already closed or fenced, a context already done). Retrying an
// append of unknown outcome may store it twice; the layers above make that
// harmless (the adaptor drops a retried duplicate by its timetick) or
// resolve it by reading (see the adaptor's documentation).
//
// # Positions
//
// A read starts at the first message whose ID is at or after the position
// (StartFrom) or strictly after it (StartAfter). cursor.All starts at the
// first message still kept; cursor.Latest delivers exactly the messages
// appended after Read returned (an append that starts after Read returned
// is delivered); cursor.Tail(n) starts where at least the last n messages
// stored when Read was called are delivered (all kept ones when fewer are
// kept; a backend may start earlier, never later, and the start is never
// gone). It lets a reader look at the end of a long log without reading
// all of it.
//
// Truncate(id) removes every message before id and keeps id itself. Its
// boundaries are exact:
//
//   - id must be at or before the last stored message; beyond it — one past
//     the end included — Truncate is an ErrInvalidPosition error and removes
//     nothing. Truncating to or below the current first message is a no-op.
//   - After Truncate(id), StartFrom(p) is ErrPositionGone for every removed
//     p, and StartAfter(p) is ErrPositionGone for p below the last removed
//     message. StartAfter(the last removed message) is valid: it starts at
//     id, the first message kept.
//   - A scanner started beyond the end (a position no message has reached
//     yet) waits and delivers only messages at or after its position.
//   - A scanner that a truncation overtakes (its next message was removed)
//     may still deliver what it had read ahead, at most its read-ahead
//     budget, and then ends with ErrPositionGone. It never skips: after a
//     removed message it delivers nothing else.
//
// A start position that has been truncated gives ErrPositionGone, from Read
// or from the scanner's Error before it delivers anything; never a silent
// skip.
//
// # Inputs
//
//   - Channel names are 1 to MaxChannelNameLen bytes of [A-Za-z0-9._-] and
//     are case-sensitive: "Orders" and "orders" are independent channels.
//   - Message.Size counts the payload and every property key and value. A
//     message of exactly Capabilities.MaxMessageBytes is accepted, one byte
//     more is ErrTooLarge, whether the bytes are payload or properties.
//   - Opener.UnmarshalID accepts only the strings Marshal produces: every
//     string it accepts marshals back to itself; anything else ("01", "+1",
//     "-1", surrounding spaces) is message.ErrCorruptID.
//   - Bad input (an invalid Channel, a message above the declared limit, a
//     corrupt ID string, use after Close, a write in read-only mode) is an
//     error matching the sentinels of this package. Nothing panics.
//
// # Deleting a channel
//
// Opener.Delete(name) ends a channel for good. It is meant for a channel
// nobody serves any more, and it is safe when somebody still does:
//
//   - Delete succeeds for a name that has no channel (never opened, or
//     deleted already) and leaves every other channel as it was.
//   - When Delete returns, every WAL of the channel that this Opener opened
//     before the call is finished: its Append, AppendBatch and Truncate
//     fail with an error matching ErrFenced (a *FencedError with Deleted
//     set) and store or remove nothing, and its scanners end with an error
//     matching ErrPositionGone once they have delivered what they had read
//     ahead.
//   - On a backend that declares Capabilities.Fencing, the writers of other
//     Openers (other processes) are finished too: a ReadWrite WAL opened
//     before Delete never stores another message, neither in the deleted
//     channel nor in a channel opened later under the same name. Readers
//     of other Openers are the caller's to stop first: what they deliver
//     after Delete is undefined (they may deliver what they read ahead,
//     or end with an error).
//   - A later Open of the name starts a new, empty channel: Last is the
//     zero ID, cursor.All delivers only messages appended after Delete,
//     and any term opens it (the deleted channel's terms went with it; its
//     writers stay fenced whatever their term). IDs of the deleted channel
//     mean nothing to the new one: a checkpoint taken before Delete must
//     not be used after it.
//
// # Lifetimes and contexts
//
// The context of Open, Delete, Append, Truncate, Last and Read bounds that call
// only: a Scanner outlives the context it was read with, and lives until
// Close, until its WAL closes, or until it fails. After WALImpl.Close or
// Opener.Close, every call of the WAL returns ErrClosed and its scanners
// end.
package walimpls
