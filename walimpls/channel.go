package walimpls

import (
	"fmt"

	"github.com/cockroachdb/errors"
)

// AccessMode says whether a WAL may write. The zero value is ReadWrite.
type AccessMode uint8

const (
	// ReadWrite opens a WAL that appends and truncates, and fences lower terms.
	ReadWrite AccessMode = iota
	// ReadOnly opens a WAL that only reads; it fences nobody.
	ReadOnly
)

func (m AccessMode) String() string {
	switch m {
	case ReadWrite:
		return "rw"
	case ReadOnly:
		return "ro"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// MaxChannelNameLen bounds channel names so that every backend can derive
// topic, file and transactional-id names from them.
const MaxChannelNameLen = 128

// Channel names a WAL to open and the term of the opener.
type Channel struct {
	// Name is 1 to MaxChannelNameLen bytes of [A-Za-z0-9._-], not "." or "..".
	Name string
	// Term is the opener's ownership term; it only grows. Must be ≥ 0.
	Term int64
	// Mode is ReadWrite (the default) or ReadOnly.
	Mode AccessMode
}

func (c Channel) String() string { return fmt.Sprintf("%s@%d(%s)", c.Name, c.Term, c.Mode) }

// Validate reports an ErrInvalidChannel error for a channel no backend may
// open.
func (c Channel) Validate() error {
	if err := ValidateChannelName(c.Name); err != nil {
		return err
	}
	if c.Term < 0 {
		return errors.Wrapf(ErrInvalidChannel, "channel %q: negative term %d", c.Name, c.Term)
	}
	if c.Mode != ReadWrite && c.Mode != ReadOnly {
		return errors.Wrapf(ErrInvalidChannel, "channel %q: unknown access mode %d", c.Name, c.Mode)
	}
	return nil
}

// ValidateChannelName reports an ErrInvalidChannel error for a name that is
// empty, too long, "." or "..", or holds a byte outside [A-Za-z0-9._-].
func ValidateChannelName(name string) error {
	switch {
	case name == "":
		return errors.Wrap(ErrInvalidChannel, "empty channel name")
	case len(name) > MaxChannelNameLen:
		return errors.Wrapf(ErrInvalidChannel, "channel name of %d bytes exceeds %d", len(name), MaxChannelNameLen)
	case name == "." || name == "..":
		return errors.Wrapf(ErrInvalidChannel, "channel name %q", name)
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		ok := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
		if !ok {
			return errors.Wrapf(ErrInvalidChannel, "channel name %q: byte %q at %d is not one of [A-Za-z0-9._-]", name, b, i)
		}
	}
	return nil
}
