package local

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/streamwal/streamwal/walimpls/impls/local/vfs"
	"golang.org/x/sys/unix"
)

// FS is the file-system seam of a Store: everything the backend does to the
// disk goes through it, so tests can inject write and sync failures
// (internal/errorfs) and power losses. Paths are full paths. The interface
// lives in package vfs, below this one, so that a fault-injecting wrapper
// need not import the backend; see vfs.FS for the methods.
type FS = vfs.FS

// File is an open file of an FS (vfs.File).
type File = vfs.File

// OSFS returns the operating system's file system.
func OSFS() FS { return osFS{} }

type osFS struct{}

type osFile struct{ f *os.File }

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f: f}, nil
}

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error {
	return os.MkdirAll(dir, perm)
}

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// FreeBytes uses statfs(2): f_bavail, the blocks left to unprivileged
// users (what the journal, not running as root, can take), times f_bsize.
func (osFS) FreeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	for {
		err := unix.Statfs(dir, &st)
		if err == nil {
			return st.Bavail * uint64(st.Bsize), nil
		}
		if err != unix.EINTR {
			return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
		}
	}
}

// Lock uses flock(2): the lock belongs to the open file description, so a
// second Store in the same process conflicts too, and the kernel releases it
// when the process dies (no stale lock after a crash).
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "unknown pid"
		if b, rerr := io.ReadAll(io.LimitReader(f, 32)); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = "pid " + strconv.Itoa(pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errors.Wrapf(ErrLocked, "%s is held by %s", name, holder)
		}
		return nil, errors.Wrapf(err, "flock %s", name)
	}
	// The pid is informational (for the error above), so it is not synced.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func (f osFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f osFile) Close() error                             { return f.f.Close() }
func (f osFile) Truncate(size int64) error                { return f.f.Truncate(size) }

// Sync is fdatasync: the metadata a plain overwrite changes (mtime) is not
// needed to read the data back, and size changes are synced by fdatasync too.
func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(f.f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.f.Name(), Err: err}
			}
			return nil
		}
	}
}

// sequentialAdviser is a File that can be told it will be read from start
// to end.
type sequentialAdviser interface{ adviseSequential() }

// adviseSequential is posix_fadvise(SEQUENTIAL): the kernel doubles its
// read-ahead window on this open file, shared by every scanner and the
// journal, which only writes. A hint, so a failure is ignored.
func (f osFile) adviseSequential() { _ = unix.Fadvise(int(f.f.Fd()), 0, 0, unix.FADV_SEQUENTIAL) }

func (f osFile) Size() (int64, error) {
	st, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// segmentName returns the file name of segment n.
func segmentName(n uint64) string { return fmt.Sprintf("wal-%016x.log", n) }

// parseSegmentName returns the number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	if len(name) != len("wal-")+16+len(".log") || !strings.HasPrefix(name, "wal-") || !strings.HasSuffix(name, ".log") {
		return 0, false
	}
	n, err := strconv.ParseUint(name[4:20], 16, 64)
	return n, err == nil
}

const lockName = "LOCK"

func (s *Store) path(name string) string { return filepath.Join(s.cfg.Dir, name) }
