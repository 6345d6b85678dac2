// Package walimplstest is the conformance suite of streamwal backends: the
// definition of "a backend works". Every backend runs all of it, over the wire
// where the backend has one:
//
//	func TestConformance(t *testing.T) {
//		walimplstest.Run(t, func(t *testing.T) walimplstest.Cluster { ... },
//			walimplstest.Implements(walimplstest.BatchRead, walimplstest.AsyncAppend))
//	}
//
// Each part runs as a named subtest on a fresh Cluster from the Factory, with
// a watchdog on every wait so a hanging backend fails instead of stalling the
// run. A part is skipped only when the backend declares, through
// walimpls.Capabilities, that it cannot do what the part checks; the skip
// message names the capability.
//
// The optional interfaces of walimpls are found by type assertion, so a
// method whose signature drifted would quietly make a backend one without
// them. A backend therefore states once, with the Implements option, which
// of them it implements (each a Feature: BatchRead for walimpls.BatchReader,
// AsyncAppend for walimpls.AsyncAppender, Create for walimpls.Creator;
// none when the option is left out). The groups Batches and Async run for
// what it declares and are skipped, naming the feature, for what it does
// not; DeclaredInterfaces fails when the declaration and the types
// disagree either way, and a part under Batches or Async fails when a WAL
// it opens lacks the declared interface.
//
// A backend with a second configuration (a size limit, fencing off, an
// admin API) may run only the parts that setting changes, with OnlyParts,
// beside the whole suite in its default configuration; running some parts
// in every configuration is not passing the suite.
//
// The parts:
//
//	DeclaredInterfaces   the Opener and the WALs (ReadWrite and ReadOnly)
//	                     implement exactly the optional interfaces the
//	                     backend declares (Implements)
//	Lifecycle            open/close, idempotent Close, name and term echoed,
//	                     bad channels rejected, use after Close, size limit
//	OpenerClose          Opener.Close closes its WALs (every call ErrClosed)
//	                     and ends their scanners; other nodes go on
//	ChannelNames         the longest valid name; names differing only in case
//	                     are independent channels with independent terms
//	SizeLimit            the limit counts properties: exactly MaxMessageBytes
//	                     is stored byte for byte, one byte more ErrTooLarge
//	ConcurrentAppendRead 8 appenders started together, 1,000 appends each,
//	                     readers before and after, byte-for-byte; stamps
//	                     at the edges of int64 terms and uint64 timeticks
//	                     (≥ 2^32, ≥ 2^63, negative terms) come back whole
//	CallerBuffers        payload bytes and property maps the caller
//	                     overwrites after Append/AppendBatch returned do not
//	                     change what readers get
//	AppendBatch          concurrent batches stored in slice order and read
//	                     back, edge stamps whole; an empty batch stores
//	                     nothing; a batch with an oversized message stores
//	                     nothing of it
//	IDOrder              sequential IDs increase across reopen; LT/LTE/EQ
//	                     agree with each other and the read order; Marshal
//	                     round-trips
//	CanonicalIDs         UnmarshalID accepts only canonical strings: each
//	                     accepted string marshals back to itself
//	Last                 zero on an empty channel, the last ID on every node,
//	                     never below an append acknowledged before the call
//	DeliverPolicies      StartFrom inclusive, StartAfter exclusive, Latest,
//	                     All = StartFrom(first)
//	cursor.Tail          Tail(n) delivers a suffix ending at the last message
//	                     with at least min(n, kept) messages, never a gone
//	                     one, then tails; n < 1 is ErrInvalidPosition
//	LatestStartsAtRead   an append right after Read(Latest) is delivered
//	IdleTail             one append reaches an idle tailing scanner promptly
//	Truncate             reads below the point are ErrPositionGone, never a
//	                     skip; StartAfter(the last removed) starts at the point
//	TruncateBoundaries   truncating to the last message keeps it; one past
//	                     the end is ErrInvalidPosition and removes nothing
//	TruncateOvertakesScanner a positioned scanner with a one-message
//	                     read-ahead, truncated under it, delivers at most its
//	                     read-ahead and ends with ErrPositionGone
//	FuturePosition       a start beyond the end waits and delivers nothing
//	                     below it; truncating to it is ErrInvalidPosition
//	ScannerContract      Close unblocks and closes Chan, Done, Error nil, no
//	                     goroutine left by 20 concurrent scanners
//	ScannerOutlivesReadContext  a scanner lives on after Read's context ends
//	ReadOnly             Append/Truncate are ErrReadOnly; RO fences nobody
//	ReadOnlyCreatesNothing  a read-only open of a channel never opened, or
//	                     deleted, is ErrNoChannel; the name opens again empty
//	Context              cancelled Open/Append/Read/Truncate/Last return
//	                     promptly
//	ParallelChannels     three channels in parallel do not interfere
//	Fencing              a higher term on another node fences the lower one:
//	                     appends and truncates fail, nothing is lost
//	SameTermTakeover     a later open of the same term takes over the same way
//	RefusedOpen          an open below the channel's term changes nothing
//	Delete               a deleted channel's writer is fenced for good, its
//	                     scanners end, the name opens again empty at any
//	                     term, a neighbour sharing the prefix is untouched
//	DeleteFencesOtherNodes
//	                     a Delete on one node fences the writer of another,
//	                     also after the name is opened again
//	Batches/<part>       for a backend that declares BatchRead, the parts
//	                     that read run again reading through
//	                     ReadBatches: the same promises, no empty slice, and
//	                     a slice the receiver cleared changes nothing
//	Async/<part>         for a backend that declares AsyncAppend, the
//	                     parts that append run again appending through
//	                     AppendBatchAsync: the same promises, done called
//	                     exactly once
//	Async/AsyncPipeline  batches handed over back to back without waiting are
//	                     stored in call order; batches in flight as the WAL
//	                     closes get one answer each, and what they say is so
//
// Every blocking call of a part is bounded by the wait timeout (a backend
// that ignores its context, or a Close that never returns, fails the part in
// seconds), and the package's own test runs the suite against fifty-one
// deliberately broken backends to show that each part can fail.
//
// Beside the suite, the package has small helpers for a backend's own tests
// (Open, AppendOK, ReadN, Collect, NothingMore), each step bounded by a
// timeout so that a broken backend fails a test instead of hanging it.
package walimplstest
