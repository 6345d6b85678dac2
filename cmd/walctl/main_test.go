package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
)

func TestPlanRebalance(t *testing.T) {
	s := cluster.Snapshot{Nodes: map[string]cluster.Versioned[cluster.NodeInfo]{}, Assignments: map[string]cluster.Versioned[cluster.Assignment]{},
		Drains: map[string]cluster.Versioned[cluster.DrainRequest]{}}
	for _, id := range []string{"a", "b", "c", "d"} {
		s.Nodes[id] = cluster.Versioned[cluster.NodeInfo]{}
	}
	s.Drains["d"] = cluster.Versioned[cluster.DrainRequest]{}
	for _, ch := range []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6"} {
		s.Assignments[ch] = cluster.Versioned[cluster.Assignment]{Value: cluster.Assignment{Channel: ch, Node: "a"}}
	}
	moves := planRebalance(s)
	count := map[string]int{"a": 7}
	for _, m := range moves {
		require.NotEqual(t, "d", m.to, "a drained node takes nothing")
		count[m.from]--
		count[m.to]++
	}
	require.Equal(t, map[string]int{"a": 3, "b": 2, "c": 2}, count)
	require.Len(t, moves, 4, "the fewest moves")

	// Balanced already: nothing to do; one node: nothing to do.
	require.Empty(t, planRebalance(cluster.Snapshot{Nodes: s.Nodes, Drains: s.Drains, Assignments: map[string]cluster.Versioned[cluster.Assignment]{}}))
}
