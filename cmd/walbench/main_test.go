package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The main job runs end to end on the default backend, twice on the same
// directory (a restart at a higher term).
func TestRunOnLocal(t *testing.T) {
	dir := t.TempDir()
	for term := int64(1); term <= 2; term++ {
		var out bytes.Buffer
		err := run(context.Background(), params{dir: dir, channels: 2, appenders: 4, records: 500, size: 128, term: term}, &out)
		require.NoError(t, err, out.String())
		require.Contains(t, out.String(), "delivered exactly once")
	}
	var out bytes.Buffer
	err := run(context.Background(), params{dir: dir, channels: 1, appenders: 1, records: 1, size: 1, term: 1}, &out)
	require.Error(t, err, "a lower term than the last run's is fenced")
}
