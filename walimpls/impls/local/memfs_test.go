package local

import (
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/streamwal/streamwal/internal/errorfs"
	"go.uber.org/atomic"
	"golang.org/x/sys/unix"
)

// memFS is an in-memory FS that can simulate a power loss: only what was
// synced is sure to survive, and unsynced sectors survive or not at random
// (so writes tear). Directory entries (create, rename, remove) are sure to
// survive once the directory was synced; before that, a power loss keeps a
// prefix of the changes made since the last SyncDir, from none to all of
// them, as a file system that commits directory changes in order does: an
// unsynced remove or rename may reach the disk before the bytes of a file
// that were written earlier but not synced.
type memFS struct {
	mu      sync.Mutex
	names   map[string]*memFile // the namespace now
	durable map[string]*memFile // the namespace as of the last SyncDir
	pending []nsChange          // the namespace changes since, in order
	// changed is closed and replaced on every namespace change (await).
	changed chan struct{}

	// before, when set, is called before every operation of hooked() that
	// changes the file system (outside the lock, so it may call crash),
	// with the operation and the file's name.
	before atomic.Pointer[func(op, name string)]
	// space is the free space FreeBytes reports: plenty until a test
	// sets it.
	space freeSpace
}

// hooked returns m under errorfs, calling the before hook (when set) ahead
// of every operation that changes the file system: the points where a test
// takes the states a power loss could leave. A file is named as it is now
// (a spare renamed into place by its segment's name); a rename by its new
// name.
func (m *memFS) hooked() FS {
	return errorfs.Wrap(m, errorfs.InjectorFunc(func(i errorfs.Info) error {
		f := m.before.Load()
		if f == nil {
			return nil
		}
		switch i.Op {
		case errorfs.OpCreate, errorfs.OpWrite, errorfs.OpSync, errorfs.OpTruncate, errorfs.OpRemove, errorfs.OpSyncDir:
			(*f)(i.Op.String(), i.Path)
		case errorfs.OpRename:
			(*f)(i.Op.String(), i.NewPath)
		}
		return nil
	}))
}

// nsChange is one change of the namespace: a create (old empty), a remove
// (new empty) or a rename.
type nsChange struct {
	old, new string
	f        *memFile
}

// applyTo makes the change in the namespace names.
func (c nsChange) applyTo(names map[string]*memFile) {
	if c.old != "" {
		delete(names, c.old)
	}
	if c.new != "" {
		names[c.new] = c.f
	}
}

// changeLocked records a namespace change that was made in m.names. Called
// with mu held.
func (m *memFS) changeLocked(c nsChange) {
	m.pending = append(m.pending, c)
	close(m.changed)
	m.changed = make(chan struct{})
}

// await waits until cond, called with the namespace now (under the lock),
// holds; it is checked again after every namespace change.
func (m *memFS) await(t testing.TB, what string, cond func(names map[string]*memFile) bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		m.mu.Lock()
		ok, changed := cond(m.names), m.changed
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

type memFile struct {
	data   []byte // what reads see
	synced []byte // what survives a power loss for sure
}

type memHandle struct {
	fs     *memFS
	f      *memFile
	name   string // as opened
	closed bool
}

const sectorSize = 512

func newMemFS() *memFS {
	return &memFS{names: map[string]*memFile{}, durable: map[string]*memFile{}, changed: make(chan struct{})}
}

// crash returns the file system a power loss at this moment leaves behind.
func (m *memFS) crash(r *rand.Rand) *memFS { return m.crashMix(r, r) }

// crashMix is crash with the namespace changes since the last SyncDir
// decided by ns (each one reaches the disk, in order, while ns.IntN(2) is
// 0) and the files' unsynced bytes by data.
func (m *memFS) crashMix(ns, data *rand.Rand) *memFS {
	inOrder := true
	return m.crashWith(func() bool {
		inOrder = inOrder && ns.IntN(2) == 0
		return inOrder
	}, data)
}

// crashUnordered is crash on a file system that makes each namespace
// change since the last SyncDir durable or not independently of the
// others, as POSIX allows: ns decides each one.
func (m *memFS) crashUnordered(ns, data *rand.Rand) *memFS {
	return m.crashWith(func() bool { return ns.IntN(2) == 0 }, data)
}

// crashWith is a power loss that keeps the pending namespace changes for
// which keep, called for each in order, says so, and the files' unsynced
// bytes as data decides.
func (m *memFS) crashWith(keep func() bool, data *rand.Rand) *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := maps.Clone(m.durable)
	for _, c := range m.pending {
		if keep() {
			c.applyTo(names)
		}
	}
	out := newMemFS()
	done := map[*memFile]*memFile{}
	for name, f := range names {
		c, ok := done[f]
		if !ok {
			c = &memFile{data: crashContent(f, data)}
			c.synced = slices.Clone(c.data)
			done[f] = c
		}
		out.names[name] = c
		out.durable[name] = c
	}
	return out
}

// crashExtremes are the two ends of what crash may leave: every unsynced
// byte and size change reached the disk (keepAll), or none did.
func crashExtremes() (keepAll, keepNone *rand.Rand) {
	return rand.New(constSource(0)), rand.New(constSource(^uint64(0)))
}

// constSource makes IntN(2) always 0 (every unsynced sector survives) or
// always 1 (none does).
type constSource uint64

func (c constSource) Uint64() uint64 { return uint64(c) }

// crashContent keeps the synced bytes and, sector by sector, either the
// unsynced new bytes or the synced old ones.
func crashContent(f *memFile, r *rand.Rand) []byte {
	n := len(f.synced)
	if r.IntN(2) == 0 {
		n = len(f.data) // the size change reached the disk
	}
	out := make([]byte, n)
	copy(out, f.synced)
	for off := 0; off < n; off += sectorSize {
		end := min(off+sectorSize, n)
		if off >= len(f.data) {
			break
		}
		if r.IntN(2) == 0 {
			copy(out[off:end], f.data[off:min(end, len(f.data))])
		}
	}
	return out
}

func (m *memFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.names[name]
	if !ok {
		if flag&os.O_CREATE == 0 {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
		}
		f = &memFile{}
		m.names[name] = f
		m.changeLocked(nsChange{new: name, f: f})
	}
	if flag&os.O_TRUNC != 0 {
		f.data = nil
	}
	return &memHandle{fs: m, f: f, name: name}, nil
}

func (m *memFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.names[oldname]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: os.ErrNotExist}
	}
	c := nsChange{old: oldname, new: newname, f: f}
	c.applyTo(m.names)
	m.changeLocked(c)
	return nil
}

func (m *memFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.names[name]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	c := nsChange{old: name, f: f}
	c.applyTo(m.names)
	m.changeLocked(c)
	return nil
}

func (m *memFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name := range m.names {
		if filepath.Dir(name) == filepath.Clean(dir) {
			out = append(out, filepath.Base(name))
		}
	}
	slices.Sort(out)
	return out, nil
}

func (m *memFS) MkdirAll(string, os.FileMode) error { return nil }

func (m *memFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.durable = maps.Clone(m.names)
	m.pending = nil
	return nil
}

func (m *memFS) Lock(string) (io.Closer, error) { return io.NopCloser(nil), nil }

func (m *memFS) FreeBytes(dir string) (uint64, error) {
	free, set, err := m.space.answer(func() (used uint64) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for name, f := range m.names {
			if filepath.Dir(name) == filepath.Clean(dir) {
				used += uint64(len(f.data))
			}
		}
		return used
	})
	if !set {
		return 1 << 50, nil
	}
	return free, err
}

func (h *memHandle) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return 0, os.ErrClosed
	}
	if off >= int64(len(h.f.data)) {
		return 0, io.EOF
	}
	n := copy(p, h.f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *memHandle) WriteAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return 0, os.ErrClosed
	}
	if end := int(off) + len(p); end > len(h.f.data) {
		h.f.data = append(h.f.data, make([]byte, end-len(h.f.data))...)
	}
	copy(h.f.data[off:], p)
	return len(p), nil
}

func (h *memHandle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return &os.PathError{Op: "close", Err: unix.EBADF}
	}
	h.closed = true
	return nil
}

func (h *memHandle) Sync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.f.synced = slices.Clone(h.f.data)
	return nil
}

func (h *memHandle) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if int(size) <= len(h.f.data) {
		h.f.data = h.f.data[:size]
	} else {
		h.f.data = append(h.f.data, make([]byte, int(size)-len(h.f.data))...)
	}
	return nil
}

func (h *memHandle) Size() (int64, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	return int64(len(h.f.data)), nil
}
