package client

import (
	"context"
	"errors"
	"sync"

	"github.com/streamwal/streamwal/cluster"
)

// moves.go: an attempt sent to an owner that stalls (a stopped process, a
// partition) gets no answer, however long its caller waits; the cluster
// moves the channel meanwhile (the lease expires, the coordinator assigns
// the channel to another node at term+1, whose open fences the stalled
// one). The client follows the cluster through its View: when the view
// shows that the node an attempt went to no longer owns the channel, the
// attempt is abandoned and Append tries the new owner.

// errOwnerMoved is the cause of an abandoned attempt's context.
var errOwnerMoved = errors.New("client: the channel moved away from the attempt's node")

// target is where an attempt goes: the owner's address, and the node and
// term the client took for the owner ("" and 0 when unknown).
type target struct {
	addr, node string
	term       int64
	// registered: the client's view had node registered when it chose
	// the target (a refusal may name an owner the view has not seen yet).
	registered bool
}

// movedAway reports whether s shows that the node of an attempt at tg
// cannot be the one to answer it for channel any more: the channel is
// assigned to another node at a higher term (its open there fences tg's
// node), or tg's node, registered when the target was chosen, is no longer
// (its lease expired: the coordinator moves its channels). Pure logic. An
// attempt whose node is unknown is never abandoned.
func movedAway(s cluster.Snapshot, channel string, tg target) bool {
	if tg.node == "" {
		return false
	}
	if a, ok := s.Assignments[channel]; ok && a.Value.Node != tg.node && a.Value.Term > tg.term {
		return true
	}
	_, registered := s.Nodes[tg.node]
	return tg.registered && !registered
}

// attempt is one attempt in flight that moves watches.
type attempt struct {
	channel string
	tg      target
	cancel  context.CancelCauseFunc
}

// moves abandons the attempts in flight whose owner the cluster moved
// away from. One goroutine per client (run) follows the view and checks
// the attempts at each change; an attempt costs a map entry, not a
// goroutine. The set is guarded by mu; run owns nothing else.
type moves struct {
	view *cluster.View

	mu       sync.Mutex
	inflight map[string]map[*attempt]struct{} // by channel

	stop chan struct{}
	done chan struct{}
}

func newMoves(view *cluster.View) *moves {
	m := &moves{view: view, inflight: map[string]map[*attempt]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

// close stops run and waits for it. Attempts still in flight are no longer
// watched.
func (m *moves) close() {
	close(m.stop)
	<-m.done
}

// run checks the attempts in flight at every change of the view.
func (m *moves) run() {
	defer close(m.done)
	for {
		s, changed := m.view.Snapshot()
		m.check(s)
		select {
		case <-changed:
		case <-m.stop:
			return
		}
	}
}

// check abandons the attempts that s shows moved away from.
func (m *moves) check(s cluster.Snapshot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for channel, set := range m.inflight {
		for a := range set {
			if movedAway(s, channel, a.tg) {
				a.cancel(errOwnerMoved)
				m.forget(a)
			}
		}
	}
}

// watch returns the context of an attempt at tg on channel, a child of
// ctx cancelled (cause errOwnerMoved) once the view shows that tg's node
// no longer owns the channel, and the function that ends the watch, which
// reports whether the attempt was abandoned so. It must be called once the
// attempt ended.
func (m *moves) watch(ctx context.Context, channel string, tg target) (context.Context, func() (moved bool)) {
	actx, cancel := context.WithCancelCause(ctx)
	a := &attempt{channel: channel, tg: tg, cancel: cancel}
	m.mu.Lock()
	set := m.inflight[channel]
	if set == nil {
		set = map[*attempt]struct{}{}
		m.inflight[channel] = set
	}
	set[a] = struct{}{}
	m.mu.Unlock()
	// A change between the owner's lookup and the line above may have
	// been checked by run before the attempt was in the set: check the
	// snapshot of now (any later change wakes run, which sees it).
	if s, _ := m.view.Snapshot(); movedAway(s, channel, tg) {
		cancel(errOwnerMoved)
	}
	return actx, func() bool {
		m.mu.Lock()
		m.forget(a)
		m.mu.Unlock()
		moved := errors.Is(context.Cause(actx), errOwnerMoved)
		cancel(nil)
		return moved
	}
}

// forget removes a from the set. Called with mu held.
func (m *moves) forget(a *attempt) {
	set := m.inflight[a.channel]
	delete(set, a)
	if len(set) == 0 {
		delete(m.inflight, a.channel)
	}
}
