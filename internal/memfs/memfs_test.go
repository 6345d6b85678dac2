package memfs_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/memfs"
)

func read(t *testing.T, fs *memfs.FS, name string) string {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	size, err := f.Size()
	require.NoError(t, err)
	b := make([]byte, size)
	if size > 0 {
		_, err = f.ReadAt(b, 0)
		require.NoError(t, err)
	}
	return string(b)
}

func write(t *testing.T, fs *memfs.FS, name, data string, off int64) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte(data), off)
	require.NoError(t, err)
}

func sync(t *testing.T, fs *memfs.FS, name string) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
}

func TestCrashKeepsWhatWasSynced(t *testing.T) {
	fs := memfs.New()
	write(t, fs, "/d/a", "synced", 0)
	sync(t, fs, "/d/a")
	require.NoError(t, fs.SyncDir("/d"))
	write(t, fs, "/d/a", "+more", 6)
	require.Equal(t, "synced+more", read(t, fs, "/d/a"), "reads see every write")

	all, none := memfs.CrashExtremes()
	require.Equal(t, "synced+more", read(t, fs.Crash(all), "/d/a"))
	require.Equal(t, "synced", read(t, fs.Crash(none), "/d/a"))
	require.Equal(t, "synced+more", read(t, fs, "/d/a"), "the crashed-from FS goes on unchanged")

	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		got := read(t, fs.Crash(rng), "/d/a")
		// The size change and the sector reach the disk or not apart: a
		// grown file may read zeros where the unsynced bytes were.
		require.Contains(t, []string{"synced", "synced+more", "synced\x00\x00\x00\x00\x00"}, got)
	}
}

func TestUnsyncedDirectoryChangesSurviveInOrder(t *testing.T) {
	fs := memfs.New()
	write(t, fs, "/d/a", "x", 0)
	sync(t, fs, "/d/a")
	require.NoError(t, fs.SyncDir("/d"))
	// Pending: rename a to b, then create c.
	require.NoError(t, fs.Rename("/d/a", "/d/b"))
	write(t, fs, "/d/c", "y", 0)

	all, none := memfs.CrashExtremes()
	names, err := fs.CrashMix(all, all).ReadDir("/d")
	require.NoError(t, err)
	require.Equal(t, []string{"b", "c"}, names)
	names, err = fs.CrashMix(none, none).ReadDir("/d")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, names)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		names, err := fs.CrashMix(rng, rng).ReadDir("/d")
		require.NoError(t, err)
		require.Contains(t, [][]string{{"a"}, {"b"}, {"b", "c"}}, names, "a prefix of the changes")
	}
	// Unordered: the create may survive without the rename before it.
	sawOutOfOrder := false
	for range 200 {
		names, err := fs.CrashUnordered(rng, rng).ReadDir("/d")
		require.NoError(t, err)
		require.Contains(t, [][]string{{"a"}, {"b"}, {"b", "c"}, {"a", "c"}}, names)
		sawOutOfOrder = sawOutOfOrder || len(names) == 2 && names[0] == "a"
	}
	require.True(t, sawOutOfOrder)
}

func TestSyncedDirectoryChangesSurvive(t *testing.T) {
	fs := memfs.New()
	write(t, fs, "/d/a", "x", 0)
	require.NoError(t, fs.Remove("/d/a"))
	write(t, fs, "/d/b", "y", 0)
	sync(t, fs, "/d/b")
	require.NoError(t, fs.SyncDir("/d"))
	_, none := memfs.CrashExtremes()
	crashed := fs.Crash(none)
	names, err := crashed.ReadDir("/d")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, names)
	require.Equal(t, "y", read(t, crashed, "/d/b"))
	require.True(t, crashed.SameAs(fs.Crash(none)))
	require.False(t, crashed.SameAs(memfs.New()))
}

func TestAwaitSeesNamespaceChanges(t *testing.T) {
	fs := memfs.New()
	done := make(chan error, 1)
	go func() {
		done <- fs.Await(context.Background(), func(names map[string]int64) bool { return names["/d/a"] == 3 })
	}()
	write(t, fs, "/d/a", "abc", 0) // the create wakes Await; the size is already 3 or not yet
	write(t, fs, "/d/b", "", 0)    // another namespace change, after the write
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not return after the namespace changed")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := fs.Await(ctx, func(map[string]int64) bool { return false })
	require.ErrorIs(t, err, context.Canceled)
}
