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

// FS is a vfs.FS whose operations an Injector may fail.
type FS struct {
	fs  vfs.FS
	inj Injector

	// mu guards the names of the open files, which renames and removes
	// change.
	mu   sync.Mutex
	open map[string]map[*file]struct{}
}

var _ vfs.FS = (*FS)(nil)

// Wrap returns fs with the operations inj fails failing.
func Wrap(fs vfs.FS, inj Injector) *FS {
	return &FS{fs: fs, inj: inj, open: map[string]map[*file]struct{}{}}
}

// inject asks the injector about i and wraps its error as the operating
// system would.
func (f *FS) inject(i Info) error {
	err := f.inj.Inject(i)
	if err == nil {
		return nil
	}
	return &os.PathError{Op: i.Op.String(), Path: i.Path, Err: err}
}

// OpenFile opens name unless the injector fails it (OpCreate with
// os.O_CREATE, else OpOpen).
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	if err := f.inject(Info{Op: op, Path: name}); err != nil {
		return nil, err
	}
	inner, err := f.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	fl := &file{File: inner, fs: f, path: name}
	f.mu.Lock()
	f.listLocked(fl)
	f.mu.Unlock()
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
	if err := f.inject(Info{Op: OpRename, Path: oldname, NewPath: newname}); err != nil {
		return err
	}
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
}

// Remove removes name unless the injector fails it.
func (f *FS) Remove(name string) error {
	if err := f.inject(Info{Op: OpRemove, Path: name}); err != nil {
		return err
	}
	if err := f.fs.Remove(name); err != nil {
		return err
	}
	f.mu.Lock()
	f.unlinkLocked(name)
	f.mu.Unlock()
	return nil
}

// ReadDir lists dir unless the injector fails it.
func (f *FS) ReadDir(dir string) ([]string, error) {
	if err := f.inject(Info{Op: OpReadDir, Path: dir}); err != nil {
		return nil, err
	}
	return f.fs.ReadDir(dir)
}

// MkdirAll creates dir unless the injector fails it.
func (f *FS) MkdirAll(dir string, perm os.FileMode) error {
	if err := f.inject(Info{Op: OpMkdirAll, Path: dir}); err != nil {
		return err
	}
	return f.fs.MkdirAll(dir, perm)
}

// SyncDir syncs dir unless the injector fails it.
func (f *FS) SyncDir(dir string) error {
	if err := f.inject(Info{Op: OpSyncDir, Path: dir}); err != nil {
		return err
	}
	return f.fs.SyncDir(dir)
}

// Lock locks name unless the injector fails it. The lock's Close is not
// injected.
func (f *FS) Lock(name string) (io.Closer, error) {
	if err := f.inject(Info{Op: OpLock, Path: name}); err != nil {
		return nil, err
	}
	return f.fs.Lock(name)
}

// FreeBytes reads the free space unless the injector fails it.
func (f *FS) FreeBytes(dir string) (uint64, error) {
	if err := f.inject(Info{Op: OpFreeBytes, Path: dir}); err != nil {
		return 0, err
	}
	return f.fs.FreeBytes(dir)
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

func (fl *file) ReadAt(p []byte, off int64) (int, error) {
	if err := fl.fs.inject(Info{Op: OpRead, Path: fl.name(), Off: off}); err != nil {
		return 0, err
	}
	return fl.File.ReadAt(p, off)
}

// WriteAt writes p unless the injector fails it; a torn fault (Rule.Torn)
// writes the first half of p before it fails.
func (fl *file) WriteAt(p []byte, off int64) (int, error) {
	err := fl.fs.inject(Info{Op: OpWrite, Path: fl.name(), Off: off, Data: p})
	if err == nil {
		return fl.File.WriteAt(p, off)
	}
	var inj *Error
	if errors.As(err, &inj) && inj.torn {
		n, _ := fl.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return 0, err
}

func (fl *file) Sync() error {
	if err := fl.fs.inject(Info{Op: OpSync, Path: fl.name()}); err != nil {
		return err
	}
	return fl.File.Sync()
}

func (fl *file) Truncate(size int64) error {
	if err := fl.fs.inject(Info{Op: OpTruncate, Path: fl.name(), Off: size}); err != nil {
		return err
	}
	return fl.File.Truncate(size)
}

func (fl *file) Size() (int64, error) {
	if err := fl.fs.inject(Info{Op: OpSize, Path: fl.name()}); err != nil {
		return 0, err
	}
	return fl.File.Size()
}

// Close closes the file, even when the injector fails it: a failed close
// releases the descriptor too.
func (fl *file) Close() error {
	injected := fl.fs.inject(Info{Op: OpClose, Path: fl.name()})
	fl.fs.mu.Lock()
	fl.fs.unlistLocked(fl)
	fl.fs.mu.Unlock()
	err := fl.File.Close()
	if injected != nil {
		return injected
	}
	return err
}
