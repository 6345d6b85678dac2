// Package walmanager owns the lifetimes of a streaming node's channel WALs.
//
// A coordinator tells a node which channels it owns and at which term:
// Open(ctx, Channel{Name, Term}) and Remove(ctx, Channel{Name, Term}). Those
// calls may be retried, reordered, duplicated and concurrent, and two nodes
// may briefly both believe they own a channel. The manager turns that stream
// of requests into a safe sequence of WAL closes and opens.
//
// # States
//
// Every channel has an expected state (what the newest accepted request
// asked for) and a current state (what is actually open on this node). A
// state is a pair (term, available|removed), totally ordered by term first,
// then available before removed:
//
//	(4, removed) < (5, available) < (5, removed) < (6, available)
//
// Both states only move forward. A request below the expected state is
// refused with ErrStaleTerm and changes nothing; an equal request joins the
// callers already waiting for it (so retries are idempotent); a higher one
// becomes the new expected state. Waiting Opens that can no longer be
// reached get ErrSuperseded at once, and an open already running for an
// older state is cancelled through its context.
//
// # Deciding apart from doing
//
// The ordering and every transition decision live in machine (machine.go),
// pure code with no goroutines, locks or I/O, tested step by step. The
// Manager (manager.go) runs one driver goroutine per channel that asks the
// machine what to do next, does it without holding the lock (close the old
// WAL first, then open the new one) and reports the result back. Because the
// driver always asks for the newest expected state, Open(5), Open(6) and
// Open(7) arriving together open term 7 only.
//
// The driver exits when its channel holds no WAL and has nothing to do, so a
// removed channel costs no goroutine. The channel's record (its terms and
// last error) is kept, so that a delayed Open of an older term is still
// refused with ErrStaleTerm after the channel was removed; Remove of a channel
// the manager never saw records the term for the same reason. GetAvailableWAL
// never creates a record. Delete(ctx, Channel{Name, Term}) is the one way a
// record goes: it removes the channel at that term, deletes it from the
// backend (Options.Deleter, usually the walimpls.Opener) and forgets it, so
// that a node whose channels come and go keeps records only of the live
// ones. A deleted channel's terms go with it, in the backend too: an Open
// after Delete opens a new, empty channel.
//
// # Outcomes
//
//   - Open returns nil once a WAL of that exact term is open, the opener's
//     error (wrapped, with its cause) if the open failed, ErrSuperseded if a
//     newer request overtook it, ErrStaleTerm if it was older than the
//     expected state. A failed open is not retried by the manager: the
//     channel reports StateFailed with the cause until a new request
//     arrives; an Open of the same term retries it, a Remove forgets it.
//   - Remove returns nil once no WAL of a term at or below its term is open
//     or opening on this node, and none can be opened any more.
//   - If the caller's context ends first, Open and Remove return the
//     context's error, but the request stays recorded: the coordinator's
//     intent is not undone by an impatient caller.
//   - A WAL handed out by GetAvailableWAL is lent (adaptor.Lend): its Close
//     returns ErrNotOwner and does nothing, because only the manager may
//     end a lifetime it tracks.
//
// # Fencing and stuck backends
//
// The driver of an open channel watches the WAL's Available channel. When it
// closes without the manager asking (the backend fenced the WAL because a
// higher term opened elsewhere), the channel reports StateUnavailable with
// the reason (the WAL's Err() error when it has such a method), and
// GetAvailableWAL refuses it. The WAL stays held until the coordinator moves
// the channel on, so that the state order is kept.
//
// A WAL Close that does not return within Options.CloseGracePeriod is
// abandoned: logged, counted, recorded as the channel's last error
// (ErrCloseAbandoned) and the state moves on. Close(ctx) waits for the
// drivers and closes every WAL, but never longer than its context allows,
// so shutdown never hangs on a stuck backend.
//
// # Testing
//
// Code that uses a manager should take a WALManager, the interface of
// *Manager's methods, so that its unit tests can use the generated mock
// (mocks/walmanager, see examples/orders_test.go). A manager can itself run
// over mocks (a MockWALOpener handing out MockWALs): it calls the opener's
// Open, then the WAL's Available once, its Err when Available closes, and
// its Close when the channel is removed or the manager closed. Those calls
// run off the manager's lock and on goroutines of their own, so that a mock
// meeting a call the test did not expect (which calls t.FailNow, ending the
// calling goroutine) fails the test with the call named, and the manager
// reports the call as an error that "did not return", instead of the test
// hanging until go test's timeout. A panic in the opener or a WAL is not
// recovered.
package walmanager
