package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// -crash-after takes every step its help names: the migration's, the
// prune's and the retention round's; anything else is refused at start.
func TestCrashAfterSteps(t *testing.T) {
	for _, step := range []string{"fenced", "sealed", "opened", "prune-deleted", "floor-recorded", "truncated"} {
		p, _, err := parseFlags([]string{"-crash-after", step})
		require.NoError(t, err, step)
		require.Equal(t, step, p.crashAfter)
	}
	_, _, err := parseFlags([]string{"-crash-after", "truncate"})
	require.ErrorContains(t, err, `-crash-after "truncate": not a step`)
}
