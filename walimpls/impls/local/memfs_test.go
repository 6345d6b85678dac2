package local

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/internal/errorfs"
	"github.com/streamwal/streamwal/internal/memfs"
)

// memFS is the in-memory file system that can simulate a power loss
// (internal/memfs), with the hook the power-loss tests take their crashes
// in.
type memFS struct {
	*memfs.FS
	// before, when set, is called before every operation of hooked() that
	// changes the file system (outside memfs's lock, so it may call crash),
	// with the operation and the file's name; after, when set, once such
	// an operation succeeded.
	before, after atomic.Pointer[func(op, name string)]
}

func newMemFS() *memFS { return &memFS{FS: memfs.New()} }

// hooked returns m under errorfs, calling the before and after hooks (when
// set) around every operation that changes the file system: the points
// where a test takes the states a power loss could leave. A file is named
// as it is now (a spare renamed into place by its segment's name); a
// rename by its new name.
func (m *memFS) hooked() FS {
	call := func(hook *atomic.Pointer[func(op, name string)], i errorfs.Info) {
		f := hook.Load()
		if f == nil {
			return
		}
		switch i.Op {
		case errorfs.OpCreate, errorfs.OpWrite, errorfs.OpSync, errorfs.OpTruncate, errorfs.OpRemove, errorfs.OpSyncDir:
			(*f)(i.Op.String(), i.Path)
		case errorfs.OpRename:
			(*f)(i.Op.String(), i.NewPath)
		}
	}
	return errorfs.Wrap(m.FS, errorfs.Hooks{
		Before: func(i errorfs.Info) error {
			call(&m.before, i)
			return nil
		},
		After: func(i errorfs.Info, err error) {
			if err == nil {
				call(&m.after, i)
			}
		},
	})
}

// crash returns the file system a power loss at this moment leaves behind.
func (m *memFS) crash(r *rand.Rand) *memFS { return &memFS{FS: m.Crash(r)} }

// crashMix is memfs.FS.CrashMix.
func (m *memFS) crashMix(ns, data *rand.Rand) *memFS { return &memFS{FS: m.CrashMix(ns, data)} }

// crashUnordered is memfs.FS.CrashUnordered.
func (m *memFS) crashUnordered(ns, data *rand.Rand) *memFS {
	return &memFS{FS: m.CrashUnordered(ns, data)}
}

// sameAs reports whether m and o hold the same files with the same bytes
// (for file systems that crash returned, whose bytes are all synced).
func (m *memFS) sameAs(o *memFS) bool { return m.SameAs(o.FS) }

// await waits until cond holds of the namespace (full path to size); it is
// checked again after every namespace change.
func (m *memFS) await(t testing.TB, what string, cond func(names map[string]int64) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Await(ctx, cond); err != nil {
		t.Fatalf("timed out waiting until %s", what)
	}
}

// crashExtremes are the two ends of what crash may leave: every unsynced
// byte and size change reached the disk (keepAll), or none did.
func crashExtremes() (keepAll, keepNone *rand.Rand) { return memfs.CrashExtremes() }
