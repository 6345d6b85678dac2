// Package walimpls is the contract between streamwal and its storage backends.
//
// A backend is a Builder (a name and a constructor) producing an Opener, which
// opens one WALImpl per channel. A WALImpl appends messages, reads them back
// through Scanners, and truncates its head. Backends only store, order and
// fence; timeticks, ordering of concurrent appends for readers, splitting of
// large messages, retries and metrics live in the layers above (the adaptor),
// so every backend stays small. Backends classify errors; they do not retry.
//
// # What every backend promises
//
// These promises are checked by the conformance suite in walimplstest; a
// backend that passes all of it works.
//
//   - IDs returned by sequential appends of one writer strictly increase, also
//     across a Close and a reopen at a higher term. IDs are unique within a
//     channel.
//   - Every acknowledged append is read back byte for byte (payload and every
//     property, reserved ones included) by every reader started before or after
//     it, until it is truncated.
//   - Scanners deliver messages in ID order.
//   - A start position that has been truncated gives ErrPositionGone, from Read
//     or later from the scanner's Error; never a silent skip.
//   - A backend that declares Capabilities.Fencing stops a writer with a lower
//     term as soon as a higher term opens the channel: its appends fail with an
//     error matching ErrFenced, and opening with a term lower than the highest
//     one seen fails with ErrFenced too.
//   - Bad input (an invalid Channel, a message above the declared limit, a
//     corrupt ID string, use after Close, a write in read-only mode) is an
//     error matching the sentinels below. Nothing panics.
//
// # Positions
//
// A read starts at the first message whose ID is at or after the position
// (StartFrom) or strictly after it (StartAfter). A position beyond the end of
// the log is allowed: the scanner waits and delivers the first message stored
// at or after it. Truncate(id) removes every message before id and keeps id
// itself; truncating beyond the last stored message is an ErrInvalidPosition
// error and removes nothing. DeliverAll starts at the first message still
// kept; DeliverLatest delivers only messages appended after Read returned.
//
// # Context
//
// The context of Open, Append, Truncate and Read bounds that call only. A
// cancelled Append may or may not have been stored: the caller learns which by
// reading. A Scanner lives until Close or until it fails.
package walimpls
