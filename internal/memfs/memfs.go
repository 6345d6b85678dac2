// Package memfs is an in-memory vfs.FS (the local backend's file-system
// seam) that can simulate a power loss, for tests that check what survives
// one without a real machine to switch off.
//
// What it promises: reads see every write at once; only what was synced
// (File.Sync) is sure to survive a power loss, and unsynced sectors (and,
// apart from them, a file's size change) survive or not as a caller-given
// random source decides, so writes tear; directory
// entries (create, rename, remove) are sure to survive once the directory
// was synced (SyncDir), and before that a power loss keeps a prefix of the
// changes made since, from none to all of them (CrashMix), as a file system
// that commits directory changes in order does, or any subset of them
// (CrashUnordered), as POSIX allows. A crash returns a new FS holding what
// survived, all of it synced; the FS it was taken from goes on unchanged,
// so a test can take a crash before every operation (wrap it with
// internal/errorfs and take them in an injector) and reopen each.
//
// Not simulated: locks (Lock always succeeds), permissions, directories
// other than as path prefixes, and a full disk (FreeBytes reports plenty).
package memfs

import (
	"bytes"
	"context"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/streamwal/streamwal/walimpls/impls/local/vfs"
)

// FS is an in-memory file system that can simulate a power loss: see the
// package comment. Safe for concurrent use.
type FS struct {
	mu      sync.Mutex
	names   map[string]*file // the namespace now
	durable map[string]*file // the namespace as of the last SyncDir
	pending []nsChange       // the namespace changes since, in order
	// changed is closed and replaced on every namespace change (Await).
	changed chan struct{}
}

var _ vfs.FS = (*FS)(nil)

// Await waits until cond holds of the namespace (each full path and its
// file's size), checking it now and again after every namespace change,
// or until ctx ends. cond is called with the file system locked: it must
// not call the FS.
func (m *FS) Await(ctx context.Context, cond func(names map[string]int64) bool) error {
	for {
		m.mu.Lock()
		names := make(map[string]int64, len(m.names))
		for name, f := range m.names {
			names[name] = int64(len(f.data))
		}
		ok, changed := cond(names), m.changed
		m.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SameAs reports whether m and o hold the same files with the same bytes
// (for file systems a crash returned, whose bytes are all synced).
func (m *FS) SameAs(o *FS) bool {
	if m == o {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(m.names) != len(o.names) {
		return false
	}
	for name, f := range m.names {
		g, ok := o.names[name]
		if !ok || !bytes.Equal(f.data, g.data) {
			return false
		}
	}
	return true
}

// nsChange is one change of the namespace: a create (old empty), a remove
// (new empty) or a rename.
type nsChange struct {
	old, new string
	f        *file
}

// applyTo makes the change in the namespace names.
func (c nsChange) applyTo(names map[string]*file) {
	if c.old != "" {
		delete(names, c.old)
	}
	if c.new != "" {
		names[c.new] = c.f
	}
}

// changeLocked records a namespace change that was made in m.names. Called
// with mu held.
func (m *FS) changeLocked(c nsChange) {
	m.pending = append(m.pending, c)
	close(m.changed)
	m.changed = make(chan struct{})
}

type file struct {
	data   []byte // what reads see
	synced []byte // what survives a power loss for sure
}

type handle struct {
	fs     *FS
	f      *file
	closed bool
}

// sectorSize is the unit in which unsynced bytes survive a power loss or
// not.
const sectorSize = 512

// New returns an empty file system.
func New() *FS {
	return &FS{names: map[string]*file{}, durable: map[string]*file{}, changed: make(chan struct{})}
}

// Crash returns the file system a power loss at this moment leaves behind,
// r deciding both the pending namespace changes (CrashMix) and the unsynced
// bytes.
func (m *FS) Crash(r *rand.Rand) *FS { return m.CrashMix(r, r) }

// CrashMix is Crash with the namespace changes since the last SyncDir
// decided by ns (each one reaches the disk, in order, while ns.IntN(2) is
// 0) and the files' unsynced bytes by data.
func (m *FS) CrashMix(ns, data *rand.Rand) *FS {
	inOrder := true
	return m.crashWith(func() bool {
		inOrder = inOrder && ns.IntN(2) == 0
		return inOrder
	}, data)
}

// CrashUnordered is Crash on a file system that makes each namespace
// change since the last SyncDir durable or not independently of the
// others, as POSIX allows: ns decides each one.
func (m *FS) CrashUnordered(ns, data *rand.Rand) *FS {
	return m.crashWith(func() bool { return ns.IntN(2) == 0 }, data)
}

// crashWith is a power loss that keeps the pending namespace changes for
// which keep, called for each in order, says so, and the files' unsynced
// bytes as data decides.
func (m *FS) crashWith(keep func() bool, data *rand.Rand) *FS {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := maps.Clone(m.durable)
	for _, c := range m.pending {
		if keep() {
			c.applyTo(names)
		}
	}
	out := New()
	done := map[*file]*file{}
	for name, f := range names {
		c, ok := done[f]
		if !ok {
			c = &file{data: crashContent(f, data)}
			c.synced = slices.Clone(c.data)
			done[f] = c
		}
		out.names[name] = c
		out.durable[name] = c
	}
	return out
}

// CrashExtremes are the random sources for the two ends of what a crash
// may leave: every unsynced
// byte and size change reached the disk (keepAll), or none did.
func CrashExtremes() (keepAll, keepNone *rand.Rand) {
	return rand.New(constSource(0)), rand.New(constSource(^uint64(0)))
}

// constSource makes IntN(2) always 0 (every unsynced sector survives) or
// always 1 (none does).
type constSource uint64

func (c constSource) Uint64() uint64 { return uint64(c) }

// crashContent keeps the synced bytes and, sector by sector, either the
// unsynced new bytes or the synced old ones.
func crashContent(f *file, r *rand.Rand) []byte {
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

func (m *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.names[name]
	if !ok {
		if flag&os.O_CREATE == 0 {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
		}
		f = &file{}
		m.names[name] = f
		m.changeLocked(nsChange{new: name, f: f})
	}
	if flag&os.O_TRUNC != 0 {
		f.data = nil
	}
	return &handle{fs: m, f: f}, nil
}

func (m *FS) Rename(oldname, newname string) error {
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

func (m *FS) Remove(name string) error {
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

func (m *FS) ReadDir(dir string) ([]string, error) {
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

func (m *FS) MkdirAll(string, os.FileMode) error { return nil }

func (m *FS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.durable = maps.Clone(m.names)
	m.pending = nil
	return nil
}

func (m *FS) Lock(string) (io.Closer, error) { return io.NopCloser(nil), nil }

// FreeBytes reports plenty of free space: the file system never fills.
func (m *FS) FreeBytes(string) (uint64, error) { return 1 << 50, nil }

func (h *handle) ReadAt(p []byte, off int64) (int, error) {
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

func (h *handle) WriteAt(p []byte, off int64) (int, error) {
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

func (h *handle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return &os.PathError{Op: "close", Err: unix.EBADF}
	}
	h.closed = true
	return nil
}

func (h *handle) Sync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.f.synced = slices.Clone(h.f.data)
	return nil
}

func (h *handle) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if int(size) <= len(h.f.data) {
		h.f.data = h.f.data[:size]
	} else {
		h.f.data = append(h.f.data, make([]byte, int(size)-len(h.f.data))...)
	}
	return nil
}

func (h *handle) Size() (int64, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	return int64(len(h.f.data)), nil
}
