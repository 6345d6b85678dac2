package errorfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/errorfs"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

func create(t *testing.T, fs *errorfs.FS, path string) (local.File, error) {
	t.Helper()
	return fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}

func TestInjectedErrorIsRecognizable(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.Wrap(local.OSFS(), errorfs.Fail(syscall.ENOSPC).On(errorfs.OpWrite))
	f, err := create(t, fs, filepath.Join(dir, "a"))
	require.NoError(t, err)
	defer f.Close()
	n, err := f.WriteAt([]byte("hello"), 0)
	require.Zero(t, n)
	require.True(t, errors.Is(err, errorfs.ErrInjected), "the standard errors.Is sees the sentinel")
	require.True(t, errors.Is(err, syscall.ENOSPC), "and the cause")
	require.Contains(t, err.Error(), "no space left on device")
	var pe *os.PathError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, "write", pe.Op)
	require.Equal(t, filepath.Join(dir, "a"), pe.Path)
	size, err := f.Size()
	require.NoError(t, err, "other operations pass")
	require.Zero(t, size, "the failed write wrote nothing")

	// No cause: the sentinel alone.
	fs = errorfs.Wrap(local.OSFS(), errorfs.Fail(nil).On(errorfs.OpMkdirAll))
	err = fs.MkdirAll(filepath.Join(dir, "d"), 0o755)
	require.ErrorIs(t, err, errorfs.ErrInjected)
	_, statErr := os.Stat(filepath.Join(dir, "d"))
	require.True(t, os.IsNotExist(statErr), "a failed operation is not done")
}

func TestRuleSelectsByOpAndPath(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.Wrap(local.OSFS(), errorfs.Fail(syscall.EIO).On(errorfs.OpSync).Path("wal-*.log"))
	seg, err := create(t, fs, filepath.Join(dir, "wal-1.log"))
	require.NoError(t, err)
	defer seg.Close()
	other, err := create(t, fs, filepath.Join(dir, "JOURNAL"))
	require.NoError(t, err)
	defer other.Close()
	_, err = seg.WriteAt([]byte("x"), 0)
	require.NoError(t, err, "not a sync")
	require.ErrorIs(t, seg.Sync(), syscall.EIO)
	require.NoError(t, other.Sync(), "another path")
	require.NoError(t, fs.SyncDir(dir), "a directory sync is OpSyncDir")

	// A glob with a separator is matched against the full path.
	full := errorfs.Fail(nil).On(errorfs.OpCreate).Path(filepath.Join(dir, "sub", "*"))
	fs = errorfs.Wrap(local.OSFS(), full)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	_, err = create(t, fs, filepath.Join(dir, "sub", "f"))
	require.ErrorIs(t, err, errorfs.ErrInjected)
	f, err := create(t, fs, filepath.Join(dir, "f"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	g, err := fs.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
	require.NoError(t, err, "opening without O_CREATE is OpOpen")
	require.NoError(t, g.Close())
}

func TestRenamesAreFollowed(t *testing.T) {
	dir := t.TempDir()
	var (
		mu   sync.Mutex
		seen []string
	)
	rec := errorfs.InjectorFunc(func(i errorfs.Info) error {
		if i.Op == errorfs.OpSync {
			mu.Lock()
			seen = append(seen, filepath.Base(i.Path))
			mu.Unlock()
		}
		return nil
	})
	fs := errorfs.Wrap(local.OSFS(), rec)
	f, err := create(t, fs, filepath.Join(dir, "spare"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
	require.NoError(t, fs.Rename(filepath.Join(dir, "spare"), filepath.Join(dir, "seg")))
	require.NoError(t, f.Sync())
	require.NoError(t, fs.Remove(filepath.Join(dir, "seg")))
	require.NoError(t, f.Sync())
	require.Equal(t, []string{"spare", "seg", "seg (deleted)"}, seen)
}

func TestNthFailsOneOperation(t *testing.T) {
	dir := t.TempDir()
	rule := errorfs.Fail(syscall.EIO).On(errorfs.OpWrite).Nth(3)
	fs := errorfs.Wrap(local.OSFS(), rule)
	f, err := create(t, fs, filepath.Join(dir, "a"))
	require.NoError(t, err)
	defer f.Close()
	var failed []int
	for i := 1; i <= 6; i++ {
		if _, err := f.WriteAt([]byte{byte(i)}, int64(i)); err != nil {
			require.ErrorIs(t, err, errorfs.ErrInjected)
			failed = append(failed, i)
		}
	}
	require.Equal(t, []int{3}, failed)
	require.Equal(t, int64(6), rule.Matched())
}

func TestProbIsDeterministic(t *testing.T) {
	run := func(seed uint64) []int {
		rule := errorfs.Fail(nil).On(errorfs.OpReadDir).Prob(0.5, seed)
		fs := errorfs.Wrap(local.OSFS(), rule)
		dir := t.TempDir()
		var failed []int
		for i := range 200 {
			if _, err := fs.ReadDir(dir); err != nil {
				require.ErrorIs(t, err, errorfs.ErrInjected)
				failed = append(failed, i)
			}
		}
		return failed
	}
	a := run(7)
	require.Equal(t, a, run(7), "the same seed fails the same operations")
	require.NotEqual(t, a, run(8))
	require.InDelta(t, 100, len(a), 40, "about half of them")
}

func TestTornWriteLandsHalf(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.Wrap(local.OSFS(), errorfs.Fail(syscall.ENOSPC).On(errorfs.OpWrite).Torn())
	f, err := create(t, fs, filepath.Join(dir, "a"))
	require.NoError(t, err)
	defer f.Close()
	n, err := f.WriteAt([]byte("abcdefgh"), 0)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Equal(t, 4, n)
	b, err := os.ReadFile(filepath.Join(dir, "a"))
	require.NoError(t, err)
	require.Equal(t, "abcd", string(b))
}

func TestSwitchAndAny(t *testing.T) {
	dir := t.TempDir()
	var syncs int
	count := errorfs.InjectorFunc(func(i errorfs.Info) error {
		if i.Op == errorfs.OpSync {
			syncs++
		}
		return nil
	})
	failSync := errorfs.NewSwitch(errorfs.Fail(syscall.EIO).On(errorfs.OpSync))
	fs := errorfs.Wrap(local.OSFS(), errorfs.Any(failSync, count))
	f, err := create(t, fs, filepath.Join(dir, "a"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync(), "a switch starts off")
	failSync.Set(true)
	require.True(t, failSync.On())
	require.ErrorIs(t, f.Sync(), syscall.EIO)
	failSync.Set(false)
	require.NoError(t, f.Sync())
	require.Equal(t, 2, syncs, "Any stops at the first error: the failed sync is not counted")
}

func TestFailedCloseReleasesTheFile(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.Wrap(local.OSFS(), errorfs.Fail(nil).On(errorfs.OpClose))
	f, err := create(t, fs, filepath.Join(dir, "a"))
	require.NoError(t, err)
	require.ErrorIs(t, f.Close(), errorfs.ErrInjected)
	_, err = f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, os.ErrClosed, "the descriptor was closed anyway")
}

func TestEveryOpCanBeFailed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a")
	require.NoError(t, os.WriteFile(path, []byte("data"), 0o644))
	calls := map[errorfs.Op]func(fs *errorfs.FS, f local.File) error{
		errorfs.OpRead:     func(_ *errorfs.FS, f local.File) error { _, err := f.ReadAt(make([]byte, 1), 0); return err },
		errorfs.OpWrite:    func(_ *errorfs.FS, f local.File) error { _, err := f.WriteAt([]byte("x"), 0); return err },
		errorfs.OpSync:     func(_ *errorfs.FS, f local.File) error { return f.Sync() },
		errorfs.OpTruncate: func(_ *errorfs.FS, f local.File) error { return f.Truncate(1) },
		errorfs.OpSize:     func(_ *errorfs.FS, f local.File) error { _, err := f.Size(); return err },
		errorfs.OpRename:   func(fs *errorfs.FS, _ local.File) error { return fs.Rename(path, path+".new") },
		errorfs.OpRemove:   func(fs *errorfs.FS, _ local.File) error { return fs.Remove(path) },
		errorfs.OpReadDir:  func(fs *errorfs.FS, _ local.File) error { _, err := fs.ReadDir(dir); return err },
		errorfs.OpMkdirAll: func(fs *errorfs.FS, _ local.File) error { return fs.MkdirAll(filepath.Join(dir, "x"), 0o755) },
		errorfs.OpSyncDir:  func(fs *errorfs.FS, _ local.File) error { return fs.SyncDir(dir) },
		errorfs.OpLock:     func(fs *errorfs.FS, _ local.File) error { _, err := fs.Lock(filepath.Join(dir, "LOCK")); return err },
		errorfs.OpFreeBytes: func(fs *errorfs.FS, _ local.File) error {
			_, err := fs.FreeBytes(dir)
			return err
		},
	}
	for op, call := range calls {
		t.Run(op.String(), func(t *testing.T) {
			fs := errorfs.Wrap(local.OSFS(), errorfs.Fail(syscall.EIO).On(op))
			f, err := fs.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			err = call(fs, f)
			require.ErrorIs(t, err, errorfs.ErrInjected)
			require.ErrorIs(t, err, syscall.EIO)
			var pe *os.PathError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, op.String(), pe.Op)
			_, statErr := os.Stat(path)
			require.NoError(t, statErr, "the file is still there: the operation was not done")
		})
	}
}

func TestHooksObserveOutcomes(t *testing.T) {
	dir := t.TempDir()
	type outcome struct {
		op  errorfs.Op
		err bool
	}
	var (
		mu  sync.Mutex
		got []outcome
	)
	failSync := errorfs.Fail(syscall.EIO).On(errorfs.OpSync).Nth(2)
	fs := errorfs.Wrap(local.OSFS(), errorfs.Hooks{
		Before: failSync.Inject,
		After: func(i errorfs.Info, err error) {
			mu.Lock()
			got = append(got, outcome{i.Op, err != nil})
			mu.Unlock()
		},
	})
	f, err := create(t, fs, filepath.Join(dir, "a"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.ErrorIs(t, f.Sync(), syscall.EIO)
	_, err = fs.OpenFile(filepath.Join(dir, "missing"), os.O_RDONLY, 0)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, f.Close())
	require.Equal(t, []outcome{
		{errorfs.OpCreate, false}, {errorfs.OpSync, false}, {errorfs.OpSync, true},
		{errorfs.OpOpen, true}, {errorfs.OpClose, false},
	}, got, "told after each operation, failed by the injector or by the file system")

	// Nil hooks do nothing.
	fs = errorfs.Wrap(local.OSFS(), errorfs.Hooks{})
	require.NoError(t, fs.MkdirAll(filepath.Join(dir, "d"), 0o755))
}
