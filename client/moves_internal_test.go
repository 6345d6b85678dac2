package client

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
)

// movedAway, step by step: which views abandon an attempt.
func TestMovedAway(t *testing.T) {
	snap := func(node string, term int64, registered ...string) cluster.Snapshot {
		s := cluster.Snapshot{Nodes: map[string]cluster.Versioned[cluster.NodeInfo]{},
			Assignments: map[string]cluster.Versioned[cluster.Assignment]{}}
		if node != "" {
			s.Assignments["ch"] = cluster.Versioned[cluster.Assignment]{Value: cluster.Assignment{Channel: "ch", Node: node, Term: term}}
		}
		for _, n := range registered {
			s.Nodes[n] = cluster.Versioned[cluster.NodeInfo]{Value: cluster.NodeInfo{ID: n}}
		}
		return s
	}
	at := target{addr: "a:1", node: "a", term: 3, registered: true}
	for _, tc := range []struct {
		name  string
		s     cluster.Snapshot
		tg    target
		moved bool
	}{
		{"still the owner", snap("a", 3, "a", "b"), at, false},
		{"the owner at a newer term (a migration on the same node)", snap("a", 4, "a", "b"), at, false},
		{"another node at a higher term", snap("b", 4, "a", "b"), at, true},
		{"another node at the attempt's term (the view is behind it)", snap("b", 3, "a", "b"), at, false},
		{"another node at a lower term (a hint newer than the view)", snap("b", 2, "a", "b"), at, false},
		{"the node's registration gone", snap("a", 3, "b"), at, true},
		{"a hinted node the view has not seen registered", snap("b", 2, "b"), target{addr: "a:1", node: "a", term: 3}, false},
		{"no assignment in the view", snap("", 0, "a"), at, false},
		{"an unknown node", snap("b", 9), target{addr: "a:1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.moved, movedAway(tc.s, "ch", tc.tg))
		})
	}
}
