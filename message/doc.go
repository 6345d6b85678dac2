// Package message is the message model every layer of streamwal shares.
//
// A Message is a payload, a set of string properties and a Kind. Everything the
// WAL itself needs to carry with a message travels in reserved properties whose
// keys start with '_' (term, timetick, vchannel, kind, split-part header,
// last-confirmed id). Users may not set such keys: New rejects them with
// ErrReservedProperty instead of silently overwriting them. The layers above the
// backends set reserved properties through the typed With* methods.
//
// An ID identifies a message inside one channel of one backend. IDs of one
// backend are totally ordered (LT, LTE, EQ, Compare) and marshal to a compact
// string; each backend decodes its own strings (walimpls.Opener.UnmarshalID), so
// there is no global decoder table. IDs of different backends are not ordered:
// Compare reports ErrIncomparableID, and LT, LTE and EQ report false.
//
// Values of this package are immutable once built: every With* method returns a
// modified copy, and accessors never expose internal maps for writing.
package message
