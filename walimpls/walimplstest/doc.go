// Package walimplstest is the conformance suite of streamwal backends: the
// definition of "a backend works". Every backend runs all of it, over the wire
// where the backend has one:
//
//	func TestConformance(t *testing.T) {
//		walimplstest.Run(t, func(t *testing.T) walimplstest.Cluster { ... })
//	}
//
// Each part runs as a named subtest on a fresh Cluster from the Factory, with
// a watchdog on every wait so a hanging backend fails instead of stalling the
// run. A part is skipped only when the backend declares, through
// walimpls.Capabilities, that it cannot do what the part checks; the skip
// message names the capability.
//
// The parts:
//
//	Lifecycle            open/close, idempotent Close, name and term echoed,
//	                     bad channels rejected, use after Close, size limit
//	ConcurrentAppendRead 8 appenders, readers before and after, byte-for-byte
//	IDOrder              sequential IDs increase across reopen; LT/LTE/EQ
//	                     agree with each other and the read order; Marshal
//	                     round-trips; corrupt ID strings are errors
//	DeliverPolicies      StartFrom inclusive, StartAfter exclusive, Latest,
//	                     All = StartFrom(first)
//	Truncate             reads below the point are ErrPositionGone, never a
//	                     skip; at and after it still work; future positions
//	ScannerContract      Close unblocks and closes Chan, Done, Error nil, no
//	                     goroutine left by 20 concurrent scanners
//	ReadOnly             Append/Truncate are ErrReadOnly; RO fences nobody
//	Context              cancelled Open/Append/Read/Truncate return promptly
//	ParallelChannels     three channels in parallel do not interfere
//	Fencing              a higher term on another node fences the lower one
//
// Beside the suite, the package has small helpers for a backend's own tests
// (Open, AppendOK, ReadN, Collect, NothingMore), each step bounded by a
// timeout so that a broken backend fails a test instead of hanging it.
package walimplstest
