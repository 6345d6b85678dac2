// Package cursor is where reading a channel starts and resumes, defined
// once for every layer: a Position (a segment of the channel's chain and
// a backend ID), a Checkpoint (a resume position and its timetick), and
// a Policy (where a scanner starts). Backends (walimpls), the adaptor,
// the chain reader (chainread), the chain WAL (chainwal) and the node's
// read RPC all take these types, so that no layer translates another's.
//
// # Positions
//
// A chain position is a segment index and a message ID of that segment's
// backend (Position). Its string form, used in checkpoints
// ("<timetick>@<position>"), keeps what a channel wrote before chains
// existed: a bare backend ID names segment 0.
//
//	position = ""                      ; no position (the zero Position)
//	         | id0                     ; segment 0
//	         | "s" segment "/" id      ; any segment
//	segment  = "0" | %x31-39 *DIGIT    ; decimal, no sign, no leading zero, < 2^64
//	id       = 1*256 %x21-7E           ; the backend's marshaled ID: printable ASCII, no space
//	id0      = id not beginning with "s"
//
// Every position has one string: segment 0 is written bare unless its ID
// begins with "s" ("s0/s12" then), and ParsePosition refuses other forms
// ("s0/12", "s01/12", "s3/"). No backend's ID begins with "s" today
// (local, memory and kafka write decimal offsets, pulsar
// "ledger:entry[:batch][@partition]", s3 "epoch.slot.index"). A string that does not parse is an
// error matching message.ErrCorruptID.
package cursor
