package walmanager

import "github.com/cockroachdb/errors"

// actionKind is what the driver of a channel must do next.
type actionKind uint8

const (
	actNone  actionKind = iota
	actOpen             // open a WAL at action.term
	actClose            // close the held WAL of action.term
)

type action struct {
	kind actionKind
	term int64
}

// waiterID names a caller blocked in Open or Remove.
type waiterID uint64

type waiter struct {
	id     waiterID
	target state
}

// resolution is the outcome handed to one waiter.
type resolution struct {
	id  waiterID
	err error
}

// verdict is what the machine decided about a request.
type verdict struct {
	// done means the caller must not wait: err is its outcome.
	done bool
	err  error
	// resolved are outcomes of other waiters decided by this request.
	resolved []resolution
	// abort asks the driver to cancel the open in flight: its state is no
	// longer wanted.
	abort bool
}

// machine is the lifetime of one channel as pure logic: no locks, no
// goroutines, no I/O. The Manager calls it under its lock, does what next
// asks without the lock, and reports back with opened or closed. Every
// method keeps these invariants:
//
//   - current ≤ expected, and neither ever moves backward (stop moves
//     expected to the removed state of its term);
//   - when nothing is open or opening and expected is a removed state,
//     current == expected (removing nothing needs no I/O);
//   - every waiter is resolved exactly once, or forgotten by its caller.
type machine struct {
	name     string
	expected state
	current  state
	// busy is true while the driver performs inflight.
	busy     bool
	inflight action
	// failed is why the last attempt to open expected failed. The driver
	// does not retry on its own: a new request re-arms it.
	failed error
	// fenced is why the WAL at current stopped being available without the
	// manager asking.
	fenced error
	// lastErr is the most recent failure of any kind, kept for Channels.
	lastErr  error
	shutdown bool
	waiters  []waiter
}

func newMachine(name string) *machine {
	return &machine{name: name, expected: initialState, current: initialState}
}

// request records a caller asking for target under id. If the verdict is
// not done, the caller waits for its resolution.
func (m *machine) request(id waiterID, target state) verdict {
	if m.shutdown {
		return verdict{done: true, err: errors.Wrapf(ErrManagerClosed, "channel %q", m.name)}
	}
	if target.less(m.expected) {
		return verdict{done: true, err: errors.Wrapf(ErrStaleTerm,
			"channel %q: request for %s is older than the expected %s", m.name, target, m.expected)}
	}
	var v verdict
	if m.expected.less(target) {
		m.expected = target
		m.failed = nil
		v.resolved = m.supersede()
		// Whatever is being opened is older than the new expected state.
		v.abort = m.busy && m.inflight.kind == actOpen
	} else if m.failed != nil {
		// The same state again after a failed open: the caller retries it.
		m.failed = nil
	}
	v.resolved = append(v.resolved, m.settle()...)
	switch {
	case !target.Removed && m.current == target:
		if m.fenced != nil {
			return verdict{done: true, resolved: v.resolved, err: m.unavailable()}
		}
		v.done = true
	case target.Removed && m.removeDone(target.Term):
		v.done = true
	default:
		m.waiters = append(m.waiters, waiter{id: id, target: target})
	}
	return v
}

// forget drops a waiter whose caller stopped waiting; false means it was
// already resolved.
func (m *machine) forget(id waiterID) bool {
	for i, w := range m.waiters {
		if w.id == id {
			m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// next returns what the driver must do now and marks it in flight; actNone
// means nothing until the next request (or fence).
func (m *machine) next() action {
	a := m.peek()
	if a.kind != actNone {
		m.busy, m.inflight = true, a
	}
	return a
}

// peek is next without marking anything.
func (m *machine) peek() action {
	switch {
	case m.busy:
		return action{}
	case !m.current.Removed && m.current.less(m.expected):
		// Close the old WAL before anything newer is opened.
		return action{kind: actClose, term: m.current.Term}
	case m.failed != nil, m.current == m.expected:
		return action{}
	case m.expected.Removed:
		// settle advances current over removed states with no I/O.
		panic("walmanager: unsettled removed state " + m.current.String() + " -> " + m.expected.String())
	default:
		return action{kind: actOpen, term: m.expected.Term}
	}
}

// idle reports whether the driver may exit: nothing to do and no WAL to
// watch.
func (m *machine) idle() bool { return m.peek().kind == actNone && m.current.Removed && !m.busy }

// opened reports the outcome of an actOpen.
func (m *machine) opened(term int64, err error) []resolution {
	m.busy, m.inflight = false, action{}
	target := available(term)
	var res []resolution
	switch {
	case err == nil:
		// Even when no longer wanted the WAL is open now and must be
		// accounted for; the driver closes it next.
		m.current, m.fenced = target, nil
		res = m.resolveOpens(target, nil)
	case m.expected == target && !m.shutdown:
		m.failed, m.lastErr = err, err
		res = m.resolveOpens(target, err)
	}
	// A failure of an attempt nobody wants any more (it was aborted) is
	// not worth reporting.
	return append(res, m.settle()...)
}

// closed reports the outcome of an actClose. The WAL is gone for the
// manager whatever err says: a failed or abandoned close is only reported.
func (m *machine) closed(term int64, err error) []resolution {
	m.busy, m.inflight = false, action{}
	m.current, m.fenced = removed(term), nil
	if err != nil {
		m.lastErr = err
	}
	return m.settle()
}

// fence records that the WAL open at term stopped being available with
// reason; false when that WAL is no longer the current one.
func (m *machine) fence(term int64, reason error) bool {
	if m.current != available(term) || m.fenced != nil {
		return false
	}
	m.fenced, m.lastErr = reason, reason
	return true
}

// stop starts the shutdown: every waiter gets ErrManagerClosed, the open
// in flight should be aborted, and next only closes what is held.
func (m *machine) stop() (res []resolution, abort bool) {
	m.shutdown = true
	for _, w := range m.waiters {
		res = append(res, resolution{id: w.id, err: errors.Wrapf(ErrManagerClosed, "channel %q", m.name)})
	}
	m.waiters = nil
	// Shutting down is removing the channel at its expected term: the
	// order is kept and next closes whatever is held.
	abort = m.busy && m.inflight.kind == actOpen
	m.expected.Removed, m.failed = true, nil
	m.settle()
	return res, abort
}

// supersede resolves every waiting Open whose state is now below expected.
// Waiting Removes are not superseded: a higher state still removes their
// term, and removeDone decides when.
func (m *machine) supersede() []resolution {
	var res []resolution
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if !w.target.Removed && w.target.less(m.expected) {
			res = append(res, resolution{id: w.id, err: errors.Wrapf(ErrSuperseded,
				"channel %q: open at term %d overtaken by %s", m.name, w.target.Term, m.expected)})
			continue
		}
		kept = append(kept, w)
	}
	m.waiters = kept
	return res
}

// resolveOpens resolves the waiters of target with err.
func (m *machine) resolveOpens(target state, err error) []resolution {
	if err != nil {
		err = errors.Wrapf(err, "channel %q: open at term %d", m.name, target.Term)
	}
	var res []resolution
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.target == target {
			res = append(res, resolution{id: w.id, err: err})
			continue
		}
		kept = append(kept, w)
	}
	m.waiters = kept
	return res
}

// settle advances current over removed states when nothing is open or
// opening (no I/O is needed to remove nothing), then resolves the Removes
// that are done.
func (m *machine) settle() []resolution {
	if !m.busy && m.current.Removed && m.expected.Removed && m.current.less(m.expected) {
		m.current = m.expected
	}
	var res []resolution
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.target.Removed && m.removeDone(w.target.Term) {
			res = append(res, resolution{id: w.id})
			continue
		}
		kept = append(kept, w)
	}
	m.waiters = kept
	return res
}

// removeDone reports whether no WAL of a term ≤ term is open or opening.
// No such WAL can be opened later either: expected is at least
// removed(term), so any later open is of a higher term.
func (m *machine) removeDone(term int64) bool {
	if !m.current.Removed && m.current.Term <= term {
		return false
	}
	return !(m.busy && m.inflight.kind == actOpen && m.inflight.term <= term)
}

// unavailable is the error of a fenced current WAL.
func (m *machine) unavailable() error {
	return notAvailable(m.fenced, "channel %q at term %d", m.name, m.current.Term)
}

// status reports the channel for Channels.
func (m *machine) status() ChannelStatus {
	st := ChannelStatus{Name: m.name, Term: m.expected.Term, LastError: m.lastErr}
	switch {
	case m.shutdown:
		st.State = StateClosed
	case m.expected.Removed && m.current == m.expected:
		st.State = StateRemoved
	case m.expected.Removed:
		st.State = StateRemoving
	case m.failed != nil:
		st.State = StateFailed
	case m.current == m.expected && m.fenced != nil:
		st.State = StateUnavailable
	case m.current == m.expected:
		st.State = StateAvailable
	default:
		st.State = StateOpening
	}
	return st
}
