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
// Fencing is a term compare-and-set on the channel's log: a ReadWrite open at
// term T records T as the channel's term when T is at least the current one
// (and is ErrFenced otherwise); every append and truncate of a WAL whose term
// is below the channel's term fails with ErrFenced. The check and the append
// happen under one lock, so once Open(T) has returned no lower-term append can
// be acknowledged. Cluster.SetFencing(false) turns this off, so that the layers
// above can test their own, log-level fencing against a backend that cannot
// fence.
//
// Fault injection, per Cluster: FailNextAppends makes the next n appends fail
// with the retryable ErrInjected, and SetAppendLatency delays every append.
//
// The backend is not durable: Capabilities.Durable is false.
package memory
