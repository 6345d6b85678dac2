package boltstore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/meta/metatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// factory makes stores in files of the test's temporary directory.
type factory struct{}

func (factory) New(t *testing.T) meta.Store {
	return openStore(t, filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
}

func (factory) Restart(t *testing.T, s meta.Store) meta.Store {
	path := s.(*boltstore.Store).Path()
	require.NoError(t, s.Close())
	return openStore(t, path, boltstore.Options{})
}

func TestConformance(t *testing.T) {
	metatest.Run(t, factory{})
}

// openStore opens a store closed at the end of the test.
func openStore(t testing.TB, path string, opts boltstore.Options) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestOptionsValidate(t *testing.T) {
	require.NoError(t, boltstore.Options{}.Validate())
	require.NoError(t, boltstore.Options{Timeout: time.Millisecond, Mode: 0o640}.Validate())
	require.Error(t, boltstore.Options{Timeout: -time.Second}.Validate())
	_, err := boltstore.Open(filepath.Join(t.TempDir(), "x.db"), boltstore.Options{Timeout: -1})
	require.ErrorIs(t, err, meta.ErrInvalid)
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	r1, err := s.Put(ctx, "a", []byte("1"), meta.Absent)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = openStore(t, path, boltstore.Options{})
	kv, err := s.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, meta.KV{Key: "a", Value: []byte("1"), Revision: r1}, kv)
	r2, err := s.Put(ctx, "b", nil, meta.Absent)
	require.NoError(t, err)
	require.Equal(t, r1+1, r2, "a store alone in its file counts its writes")
}
