package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/walimpls"
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

// A -config file with a misspelt key stops the run before anything starts,
// naming the file, the key's line and its path.
func TestRunRefusesAMisspeltConfig(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"misspelt backend key", "bakend: memory\n", `:1: bakend: unknown key (did you mean "backend"?)`},
		{"misspelt section", "backend: local\nlcoal:\n  dir: ./d2\n", `:2: lcoal: unknown key (did you mean "local"?)`},
		{"misspelt nested key", "backend: local\nlocal:\n  dir: ./d2\n  segmentByte: 1048576\n", `:4: local.segmentByte: unknown key (did you mean "segmentBytes"?)`},
		{"wrong type", "backend: local\nlocal:\n  dir: ./d2\n  segmentBytes: big\n", `:4: local.segmentBytes: want an integer, got "big"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.yaml")
			require.NoError(t, os.WriteFile(path, []byte(c.yaml), 0o600))
			var out bytes.Buffer
			err := run(context.Background(), params{config: path, dir: t.TempDir(), channels: 1, appenders: 1, records: 1, size: 1, term: 1}, &out)
			require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
			require.Contains(t, err.Error(), "selector: "+path+c.want)
			require.Empty(t, out.String())
		})
	}
}
