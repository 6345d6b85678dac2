// Package vfs is the file-system seam of the local backend: the two
// interfaces through which a local.Store does all of its file I/O. It holds
// no implementation; local.OSFS is the operating system's, and tests wrap
// either with internal/errorfs to inject faults or swap in an in-memory one
// that can lose what was not synced.
//
// It is a package of its own, below local, so that a fault-injecting file
// system can implement these interfaces without importing the backend it is
// used to test. local.FS and local.File are aliases of FS and File.
package vfs

import (
	"io"
	"os"
)

// FS is a file system as a local.Store uses it. Paths are full paths.
type FS interface {
	// OpenFile opens or creates a file (os.OpenFile flags).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Rename renames a file atomically.
	Rename(oldname, newname string) error
	// Remove deletes a file.
	Remove(name string) error
	// ReadDir lists the names of a directory's entries.
	ReadDir(dir string) ([]string, error)
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// SyncDir makes the directory's entries (creates, renames, removes)
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on name for this open file
	// description, writing the caller's pid into it. When another holder has
	// it, the error wraps local.ErrLocked and names the holder's pid.
	Lock(name string) (io.Closer, error)
	// FreeBytes returns the bytes an unprivileged writer may still
	// allocate on the file system that holds dir (statfs(2): available
	// blocks times the block size). The local backend reads its disk
	// watermarks through it.
	FreeBytes(dir string) (uint64, error)
}

// File is an open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data durable (fdatasync).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size returns the file's current size.
	Size() (int64, error)
}
