// Package errorfs wraps a local-backend file system (vfs.FS) so that tests
// can make chosen operations fail, in the spirit of pebble's vfs/errorfs.
//
// A wrapped FS asks its Injector before each operation; a non-nil answer is
// returned instead of doing the operation (a torn write lands part of its
// bytes first). Injectors compose: a Rule selects operations by kind (Op),
// by path (a glob or a predicate), by index (the Nth matching operation)
// and by probability (a seeded, deterministic draw); Any tries several in
// order; a Switch turns one on and off while a test runs; an InjectorFunc is
// any function, for a test that wants to count, block or crash at an
// operation; Hooks adds an Observer, told each operation's outcome once it
// is over (a sync that has returned, not one about to start).
//
// What it promises:
//
//   - Every injected error matches ErrInjected with the standard errors.Is,
//     and its cause too (a Rule failing with syscall.ENOSPC is
//     errors.Is(err, syscall.ENOSPC) and says "no space left on device"). It
//     is an *os.PathError naming the operation and the path, like the
//     operating system's.
//   - An operation that is not failed is passed to the wrapped FS unchanged,
//     and an injector sees the file's name now: renames through the FS are
//     followed, so a file opened as a spare and renamed into place is seen
//     under its new name.
//   - A Rule with the same configuration and the same sequence of
//     operations fails the same ones (its probability draws come from its
//     seed). Concurrent operations reach it in the order they are
//     scheduled, which a test must fix itself if it needs the index or the
//     draws to be reproducible.
//   - Injectors are called from the goroutines doing the I/O, possibly
//     several at once, and must be safe for that; the ones here are.
//
// Not provided: simulated crashes. The wrapper keeps no copy of what was
// synced, so it cannot drop unsynced writes; internal/memfs can, and a test
// that wants a power loss at a chosen operation wraps a memfs.FS with an
// InjectorFunc that takes its crash there.
package errorfs
