package errorfs

import (
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls/impls/local/vfs"
)

// ErrInjected is matched by every error an injector made an operation
// return.
var ErrInjected = errors.New("errorfs: injected fault")

// Op is a kind of file-system operation.
type Op uint8

// The operations an injector can fail. OpenFile is OpCreate when its flags
// hold os.O_CREATE, else OpOpen.
const (
	OpOpen Op = iota + 1
	OpCreate
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpSize
	OpClose
	OpRename
	OpRemove
	OpReadDir
	OpMkdirAll
	OpSyncDir
	OpLock
	OpFreeBytes
)

var opNames = [...]string{
	OpOpen: "open", OpCreate: "create", OpRead: "read", OpWrite: "write",
	OpSync: "sync", OpTruncate: "truncate", OpSize: "size", OpClose: "close",
	OpRename: "rename", OpRemove: "remove", OpReadDir: "readdir",
	OpMkdirAll: "mkdirall", OpSyncDir: "syncdir", OpLock: "lock",
	OpFreeBytes: "freebytes",
}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Info is one operation about to be done.
type Info struct {
	Op Op
	// Path is the file's or directory's full path: for a file operation
	// its name now (renames through the FS followed), for OpRename the old
	// name.
	Path string
	// NewPath is OpRename's new name.
	NewPath string
	// Off is the offset of OpRead and OpWrite, and OpTruncate's size.
	Off int64
	// Data is what OpWrite writes. An injector must not change it or keep
	// it.
	Data []byte
}

// Injector decides which operations fail.
type Injector interface {
	// Inject returns the error the operation fails with, or nil to let it
	// be done. The error should come from a Rule, or match ErrInjected,
	// so that tests can tell an injected fault from a real one.
	Inject(Info) error
}

// InjectorFunc is a function as an Injector.
type InjectorFunc func(Info) error

// Inject calls f.
func (f InjectorFunc) Inject(i Info) error { return f(i) }

// Any is an Injector that asks injs in order and returns the first error:
// the ones after it are not asked (nor their indexes counted).
func Any(injs ...Injector) Injector {
	return InjectorFunc(func(i Info) error {
		for _, inj := range injs {
			if err := inj.Inject(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// Observer is told the outcome of every operation, once it was done or
// failed by the injector. An Injector given to Wrap that is also an Observer
// is told (one inside Any is not): a test that wants to act once a sync is
// over, not before it starts, observes it.
type Observer interface {
	Observe(i Info, err error)
}

// Hooks is an Injector and Observer made of two functions, either of which
// may be nil.
type Hooks struct {
	// Before is Inject.
	Before func(Info) error
	// After is Observe.
	After func(Info, error)
}

// Inject calls h.Before.
func (h Hooks) Inject(i Info) error {
	if h.Before == nil {
		return nil
	}
	return h.Before(i)
}

// Observe calls h.After.
func (h Hooks) Observe(i Info, err error) {
	if h.After != nil {
		h.After(i, err)
	}
}

// FS is a vfs.FS whose operations an Injector may fail.
type FS struct {
	fs  vfs.FS
	inj Injector
	obs Observer // inj, if it is one

	// mu guards the names of the open files, which renames and removes
	// change.
	mu   sync.Mutex
	open map[string]map[*file]struct{}
}

var _ vfs.FS = (*FS)(nil)

// Wrap returns fs with the operations inj fails failing.
func Wrap(fs vfs.FS, inj Injector) *FS {
	obs, _ := inj.(Observer)
	return &FS{fs: fs, inj: inj, obs: obs, open: map[string]map[*file]struct{}{}}
}

// do is op unless the injector fails it, as the operating system would
// (an *os.PathError); the observer, if any, is told the outcome.
func (f *FS) do(i Info, op func() error) error {
	err := f.inj.Inject(i)
	if err != nil {
		err = pathError(i, err)
	} else {
		err = op()
	}
	f.observe(i, err)
	return err
}

// pathError is an injected err as the operating system reports errors.
func pathError(i Info, err error) error {
	return &os.PathError{Op: i.Op.String(), Path: i.Path, Err: err}
}

// observe tells the observer, if any, the outcome of i.
func (f *FS) observe(i Info, err error) {
	if f.obs != nil {
		f.obs.Observe(i, err)
	}
}

// OpenFile opens name unless the injector fails it (OpCreate with
// os.O_CREATE, else OpOpen).
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	var fl *file
	err := f.do(Info{Op: op, Path: name}, func() error {
		inner, err := f.fs.OpenFile(name, flag, perm)
		if err != nil {
			return err
		}
		fl = &file{File: inner, fs: f, path: name}
		f.mu.Lock()
		f.listLocked(fl)
		f.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return fl, nil
}

// listLocked files fl under its name. Called with mu held.
func (f *FS) listLocked(fl *file) {
	set := f.open[fl.path]
	if set == nil {
		set = map[*file]struct{}{}
		f.open[fl.path] = set
	}
	set[fl] = struct{}{}
}

// unlistLocked takes fl out of the open files. Called with mu held.
func (f *FS) unlistLocked(fl *file) {
	if set := f.open[fl.path]; set != nil {
		delete(set, fl)
		if len(set) == 0 {
			delete(f.open, fl.path)
		}
	}
}

// unlinkLocked renames the open files of name as the kernel shows a file
// whose name was taken away: it is no longer reachable by it. Called with
// mu held.
func (f *FS) unlinkLocked(name string) {
	for fl := range f.open[name] {
		f.unlistLocked(fl)
		fl.path = name + " (deleted)"
		f.listLocked(fl)
	}
}

// Rename renames oldname unless the injector fails it; the open files of
// oldname are seen under newname from then on.
func (f *FS) Rename(oldname, newname string) error {
	return f.do(Info{Op: OpRename, Path: oldname, NewPath: newname}, func() error {
		if err := f.fs.Rename(oldname, newname); err != nil {
			return err
		}
		if oldname == newname {
			return nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.unlinkLocked(newname)
		for fl := range f.open[oldname] {
			f.unlistLocked(fl)
			fl.path = newname
			f.listLocked(fl)
		}
		return nil
	})
}

// Remove removes name unless the injector fails it.
func (f *FS) Remove(name string) error {
	return f.do(Info{Op: OpRemove, Path: name}, func() error {
		if err := f.fs.Remove(name); err != nil {
			return err
		}
		f.mu.Lock()
		f.unlinkLocked(name)
		f.mu.Unlock()
		return nil
	})
}

// ReadDir lists dir unless the injector fails it.
func (f *FS) ReadDir(dir string) (names []string, err error) {
	err = f.do(Info{Op: OpReadDir, Path: dir}, func() error {
		names, err = f.fs.ReadDir(dir)
		return err
	})
	return names, err
}

// MkdirAll creates dir unless the injector fails it.
func (f *FS) MkdirAll(dir string, perm os.FileMode) error {
	return f.do(Info{Op: OpMkdirAll, Path: dir}, func() error { return f.fs.MkdirAll(dir, perm) })
}

// SyncDir syncs dir unless the injector fails it.
func (f *FS) SyncDir(dir string) error {
	return f.do(Info{Op: OpSyncDir, Path: dir}, func() error { return f.fs.SyncDir(dir) })
}

// Lock locks name unless the injector fails it. The lock's Close is not
// injected.
func (f *FS) Lock(name string) (lock io.Closer, err error) {
	err = f.do(Info{Op: OpLock, Path: name}, func() error {
		lock, err = f.fs.Lock(name)
		return err
	})
	return lock, err
}

// FreeBytes reads the free space unless the injector fails it.
func (f *FS) FreeBytes(dir string) (free uint64, err error) {
	err = f.do(Info{Op: OpFreeBytes, Path: dir}, func() error {
		free, err = f.fs.FreeBytes(dir)
		return err
	})
	return free, err
}

// file is an open file of an FS.
type file struct {
	vfs.File
	fs   *FS
	path string // guarded by fs.mu
}

func (fl *file) name() string {
	fl.fs.mu.Lock()
	defer fl.fs.mu.Unlock()
	return fl.path
}

func (fl *file) ReadAt(p []byte, off int64) (n int, err error) {
	err = fl.fs.do(Info{Op: OpRead, Path: fl.name(), Off: off}, func() error {
		n, err = fl.File.ReadAt(p, off)
		return err
	})
	return n, err
}

// WriteAt writes p unless the injector fails it; a torn fault (Rule.Torn)
// writes the first half of p before it fails.
func (fl *file) WriteAt(p []byte, off int64) (n int, err error) {
	i := Info{Op: OpWrite, Path: fl.name(), Off: off, Data: p}
	if ierr := fl.fs.inj.Inject(i); ierr != nil {
		var inj *Error
		if errors.As(ierr, &inj) && inj.torn {
			n, _ = fl.File.WriteAt(p[:len(p)/2], off)
		}
		err = pathError(i, ierr)
	} else {
		n, err = fl.File.WriteAt(p, off)
	}
	fl.fs.observe(i, err)
	return n, err
}

func (fl *file) Sync() error {
	return fl.fs.do(Info{Op: OpSync, Path: fl.name()}, fl.File.Sync)
}

func (fl *file) Truncate(size int64) error {
	return fl.fs.do(Info{Op: OpTruncate, Path: fl.name(), Off: size}, func() error { return fl.File.Truncate(size) })
}

func (fl *file) Size() (size int64, err error) {
	err = fl.fs.do(Info{Op: OpSize, Path: fl.name()}, func() error {
		size, err = fl.File.Size()
		return err
	})
	return size, err
}

// Close closes the file, even when the injector fails it: a failed close
// releases the descriptor too.
func (fl *file) Close() error {
	i := Info{Op: OpClose, Path: fl.name()}
	injected := fl.fs.inj.Inject(i)
	fl.fs.mu.Lock()
	fl.fs.unlistLocked(fl)
	fl.fs.mu.Unlock()
	err := fl.File.Close()
	if injected != nil {
		err = pathError(i, injected)
	}
	fl.fs.observe(i, err)
	return err
}
