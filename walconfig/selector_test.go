package walconfig_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaultIsLocal(t *testing.T) {
	cfg, err := walconfig.Parse(nil)
	require.NoError(t, err)
	require.Equal(t, "local", cfg.Default())

	dir := t.TempDir()
	cfg, err = walconfig.Parse([]byte("local:\n  dir: " + dir + "\n  sync: none\n"))
	require.NoError(t, err)
	o, err := walconfig.Build(context.Background(), cfg, walconfig.Deps{})
	require.NoError(t, err)
	require.True(t, o.Capabilities().Fencing)
	require.Equal(t, "local", o.Name)
	// The local store's own API, without a type assertion.
	require.NotNil(t, o.Local)
	require.Nil(t, o.Memory)
	require.Zero(t, o.Local.Recovery().DroppedBytes, "a new store drops nothing")
	second := o.Local.NewOpener()
	require.Equal(t, o.Capabilities(), second.Capabilities())
	require.NoError(t, second.Close())
	require.NoError(t, o.Close())
	_, err = os.Stat(filepath.Join(dir, "LOCK"))
	require.NoError(t, err, "the local backend lives in the configured directory")
}

func TestExplicitChoiceWins(t *testing.T) {
	cfg, err := walconfig.Parse([]byte("backend: memory\nmemory:\n  maxMessageBytes: 1024\nlocal:\n  dir: /nonexistent/never/used\n"))
	require.NoError(t, err)
	reg, err := walconfig.Registry(memory.NewCluster())
	require.NoError(t, err)
	o, err := walconfig.Build(context.Background(), cfg, walconfig.Deps{Registry: reg})
	require.NoError(t, err)
	require.Equal(t, 1024, o.Capabilities().MaxMessageBytes)
	require.NotNil(t, o.Memory)
	require.Nil(t, o.Local)
	require.NoError(t, o.Close())
}

func TestBadConfig(t *testing.T) {
	_, err := walconfig.Parse([]byte("backend: [unclosed"))
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)

	cfg, err := walconfig.Parse([]byte("backend: rocksdb\n"))
	require.NoError(t, err)
	_, err = walconfig.Build(context.Background(), cfg, walconfig.Deps{})
	require.ErrorIs(t, err, walimpls.ErrUnknownBackend)
	require.Contains(t, err.Error(), "kafka, local, memory, pulsar")

	_, err = walconfig.Parse([]byte("backend: memory\nmemory:\n  maxMesageBytes: 1024\n"))
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig, "a misspelt key is an error, not a silent default")

	cfg, err = walconfig.Parse([]byte("local:\n  sync: sometimes\n  dir: " + t.TempDir() + "\n"))
	require.NoError(t, err)
	_, err = walconfig.Build(context.Background(), cfg, walconfig.Deps{})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)

	_, err = walconfig.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)
}
