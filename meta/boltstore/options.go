package boltstore

import (
	"os"
	"time"

	"github.com/cockroachdb/errors"
)

// Options tunes Open. The zero value is the default.
type Options struct {
	// Timeout bounds how long Open waits for the file lock another opener
	// holds (another Store in this process, or another process). Zero means
	// DefaultTimeout; it must not be negative. bbolt polls the lock every
	// 50 ms, so Open may give up up to that much early.
	Timeout time.Duration
	// Mode is the permission of a new file. Zero means 0o600.
	Mode os.FileMode
}

// DefaultTimeout is the lock timeout of Open when Options.Timeout is zero.
const DefaultTimeout = time.Second

// Validate reports options Open cannot use.
func (o Options) Validate() error {
	if o.Timeout < 0 {
		return errors.Newf("boltstore: negative Timeout %s", o.Timeout)
	}
	if o.Mode&^os.ModePerm != 0 {
		return errors.Newf("boltstore: Mode %s is not a permission", o.Mode)
	}
	return nil
}

// withDefaults fills in the zero values.
func (o Options) withDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Mode == 0 {
		o.Mode = 0o600
	}
	return o
}
