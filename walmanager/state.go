package walmanager

import "fmt"

// state is a point in a channel's lifetime: a term and whether the WAL of
// that term is (meant to be) available or removed. States are totally
// ordered, term first, then available before removed.
type state struct {
	Term    int64
	Removed bool
}

// initialState precedes every state a request can ask for (terms are ≥ 0):
// a channel the manager never saw.
var initialState = state{Term: -1, Removed: true}

func available(term int64) state { return state{Term: term} }
func removed(term int64) state   { return state{Term: term, Removed: true} }

// less reports whether s comes strictly before o.
func (s state) less(o state) bool {
	if s.Term != o.Term {
		return s.Term < o.Term
	}
	return !s.Removed && o.Removed
}

func (s state) String() string {
	switch {
	case s == initialState:
		return "none"
	case s.Removed:
		return fmt.Sprintf("removed@%d", s.Term)
	default:
		return fmt.Sprintf("available@%d", s.Term)
	}
}
