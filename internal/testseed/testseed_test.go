package testseed_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/testseed"
)

func TestSeedFromEnv(t *testing.T) {
	t.Setenv(testseed.Env, "12345")
	require.Equal(t, uint64(12345), testseed.Seed(t))
}
