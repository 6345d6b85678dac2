// Package memory is the in-memory reference backend of streamwal.
//
// A Cluster is one in-process "backend deployment": every Opener made from the
// same Cluster sees the same logs, so two Openers are two nodes sharing one log.
// There is no package-level state; tests make as many Clusters as they like and
// run in parallel.
//
// Each channel is a slice of messages with a per-channel sequence number as
// ID, starting at 0. The log outlives the WALs that write it, so IDs keep
// increasing across a Close and a reopen.
//
// Fencing is a compare-and-set on the channel's log of the pair (term, claim):
// a ReadWrite open at term T is ErrFenced when T is below the channel's term;
// otherwise it records T and a new claim number, so that the latest open of
// the highest term owns the channel. Every append and truncate of a WAL whose
// (term, claim) is no longer the channel's fails with ErrFenced, decided under
// the same lock as the append itself: once Open has returned, no append of
// an earlier writer - of a lower term or of the same one - can be
// acknowledged. Cluster.SetFencing(false) turns this off, so that the layers
// above can test their own, log-level fencing against a backend that cannot
// fence.
//
// A scanner copies up to ReadOption.ReadAheadBytes (1 MiB by default, at
// least one message) from the log at a time and checks the truncation point
// again before the next copy, so a truncation overtakes it after at most
// that much. A batch scanner (ReadBatches) hands each copy over as one
// slice.
//
// Asynchronous appends (AppendBatchAsync) queue for one goroutine per WAL,
// started with the first, which stores them one after the other: in call
// order. Close waits for it.
//
// Fault injection, per Cluster: FailNextAppends makes the next n appends fail
// with the retryable ErrInjected, and SetAppendLatency delays every append;
// WaitingAppends counts the appends it holds up, for tests to wait on.
//
// The backend is not durable: Capabilities.Durable is false.
package memory
