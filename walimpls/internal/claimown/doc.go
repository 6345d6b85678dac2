// Package claimown holds what the backends that fence writers with term
// claims (kafka, pulsar) share of their "claim, then own" writers: a writer
// writes a claim (term, nonce), takes an exclusive resource (Kafka: a
// transactional producer id; Pulsar: a WaitForExclusive producer), and
// keeps writing only while its own claim wins. How claims are stored, read
// and encoded, and what the writer loop does with a request, stay in the
// backends.
//
// It promises:
//
//   - Claim.Beats is the one winner rule: a deletion claim beats every
//     claim and no claim beats it; otherwise the highest term wins, and
//     among equal terms the claim written last.
//   - Acquire runs the owning sequence in one order: an optional check of
//     the claims, take the resource, check the claims again, and release
//     the resource when that check fails, so that a resource is only ever
//     kept after a claim check that followed its taking.
//   - AfterFailedSend is the one decision about a send that failed, once
//     the writer checked its claim again: the claim still wins (the
//     failure is the send's own; a resource taken from the writer was
//     taken by a lower term that gives up), a claim beats it (fenced for
//     good), or the check failed (the requests fail with both errors,
//     errors.Is matching each).
//   - Fence latches a writer's fence: the first error set is kept and
//     returned by every later call, and a channel closes when it is set; a
//     deletion may replace it.
//   - Mailbox carries requests to the one goroutine (the loop) that owns the
//     resource, and its outcome rules are the same for every backend: a
//     request refused before it was queued failed with an error marked
//     walimpls.MarkNotStored; after it was queued, the caller gets the
//     loop's reply, or an error: when its context ends first, of unknown
//     outcome; when the loop returned without taking it, marked
//     walimpls.MarkNotStored (a loop answers every request it takes).
//
// Pure logic apart from Mailbox and Fence, which own no goroutine: the
// loop is the backend's, started with Mailbox.Go and stopped with
// Mailbox.Close.
package claimown
