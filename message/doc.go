// Package message is the message model every layer of streamwal shares.
//
// A Message is a payload, a set of string properties and a Kind. Everything the
// WAL itself needs to carry with a message travels in reserved properties whose
// keys start with '_' (term, timetick, vchannel, kind, split-part header,
// last-confirmed id). Users may not set such keys: New rejects them with
// ErrReservedProperty instead of silently overwriting them. The layers above the
// backends set reserved properties through the typed With* methods.
//
// Kind, term and timetick, which every record of a WAL carries, are held
// in a stamp: values beside the map rather than decimal strings in it.
// Properties shows them like any other property (Get, All, Pairs and Size
// see their canonical decimal form), Restore moves them out of a map it is
// given when they are in that form (any other value stays in the map,
// exactly as stored), and a backend may store the stamp's binary form
// instead of strings (Message.AppendStamp, Unstamped, DecodeStamp):
//
//	byte 0   flags: 1 kind, 2 term, 4 timetick (other bits: not a stamp)
//	         then, each only when its flag is set, in this order:
//	kind     one byte
//	term     signed varint (encoding/binary.AppendVarint)
//	timetick unsigned varint (encoding/binary.AppendUvarint)
//
// A stamp ends after its last field, so a backend can store it in front of
// the rest of a record.
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
