package chain

import (
	"encoding/json"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/walimpls"
)

const (
	// MaxSegments bounds the segments a chain keeps: a migration beyond it
	// is refused until pruning drops some. With MaxParamsLen it keeps a
	// chain within etcd's default request size.
	MaxSegments = 256
	// MaxParamsLen bounds a backend's Params.
	MaxParamsLen = 4096
	// MaxNameLen bounds a backend's Name and Kind, and a requester.
	MaxNameLen = 128
)

// Validate reports an ErrInvalid error naming the first rule of the
// package documentation that c breaks.
func (c Chain) Validate() error {
	if err := walimpls.ValidateChannelName(c.Channel); err != nil {
		return errmark.Mark(errors.Wrap(err, "chain"), ErrInvalid)
	}
	n := len(c.Segments)
	if n == 0 || n > MaxSegments {
		return errors.Wrapf(ErrInvalid, "chain %s: %d segments (1 to %d)", c.Channel, n, MaxSegments)
	}
	used := map[[2]string]uint64{}
	var prevTT uint64
	for i, s := range c.Segments {
		if want := c.First() + uint64(i); s.Index != want || (i > 0 && s.Index == 0) {
			return errors.Wrapf(ErrInvalid, "chain %s: segment %d follows segment %d", c.Channel, s.Index, c.Segments[i-1].Index)
		}
		if err := c.validateSegment(s, i == n-1, prevTT); err != nil {
			return err
		}
		key := [2]string{s.Backend.Name, s.Backend.Channel}
		if j, ok := used[key]; ok {
			return errors.Wrapf(ErrInvalid, "chain %s: segments %d and %d share backend channel %s", c.Channel, j, s.Index, s.Backend)
		}
		used[key] = s.Index
		if i == n-1 {
			break
		}
		next := c.Segments[i+1]
		if next.FirstTerm != s.Seal.Term {
			return errors.Wrapf(ErrInvalid, "chain %s: segment %d begins at term %d, not at segment %d's seal term %d",
				c.Channel, next.Index, next.FirstTerm, s.Index, s.Seal.Term)
		}
		if next.Backend.Name == s.Backend.Name {
			return errors.Wrapf(ErrInvalid, "chain %s: segments %d and %d are both on backend %q", c.Channel, s.Index, next.Index, s.Backend.Name)
		}
		prevTT = s.Seal.TimeTick
	}
	if c.Pending != nil {
		return c.validatePending(used)
	}
	return nil
}

func (c Chain) validateSegment(s Segment, last bool, prevTT uint64) error {
	if err := s.Backend.Validate(); err != nil {
		return errors.Wrapf(err, "chain %s: segment %d", c.Channel, s.Index)
	}
	switch {
	case s.FirstTerm < 0:
		return errors.Wrapf(ErrInvalid, "chain %s: segment %d: negative first term %d", c.Channel, s.Index, s.FirstTerm)
	case s.Created.IsZero():
		return errors.Wrapf(ErrInvalid, "chain %s: segment %d: no creation time", c.Channel, s.Index)
	case last && s.Seal != nil:
		return errors.Wrapf(ErrInvalid, "chain %s: last segment %d is sealed (%s): no segment takes the writes", c.Channel, s.Index, *s.Seal)
	case last:
		return nil
	case s.Seal == nil:
		return errors.Wrapf(ErrInvalid, "chain %s: segment %d is not the last but is not sealed", c.Channel, s.Index)
	}
	seal := *s.Seal
	switch {
	case seal.Term <= s.FirstTerm:
		return errors.Wrapf(ErrInvalid, "chain %s: segment %d: seal term %d is not above its first term %d", c.Channel, s.Index, seal.Term, s.FirstTerm)
	case seal.At.IsZero():
		return errors.Wrapf(ErrInvalid, "chain %s: segment %d: seal has no time", c.Channel, s.Index)
	case seal.TimeTick < prevTT:
		return errors.Wrapf(ErrInvalid, "chain %s: segment %d: seal timetick %d is below the previous seal's %d", c.Channel, s.Index, seal.TimeTick, prevTT)
	case seal.End != "" && seal.TimeTick == prevTT:
		return errors.Wrapf(ErrInvalid, "chain %s: segment %d: ends at %s but its seal timetick %d is not above the previous seal's",
			c.Channel, s.Index, seal.End, seal.TimeTick)
	}
	if seal.End != "" {
		if err := cursor.ValidateID("seal end", seal.End); err != nil {
			return errmark.Mark(errors.Wrapf(err, "chain %s: segment %d", c.Channel, s.Index), ErrInvalid)
		}
	}
	return nil
}

// validatePending checks c.Pending; used holds the kept segments' backend
// channels.
func (c Chain) validatePending(used map[[2]string]uint64) error {
	m, last := *c.Pending, c.Last()
	if err := m.Target.Validate(); err != nil {
		return errors.Wrapf(err, "chain %s: pending migration", c.Channel)
	}
	if j, ok := used[[2]string{m.Target.Name, m.Target.Channel}]; ok {
		return errors.Wrapf(ErrInvalid, "chain %s: pending migration targets backend channel %s of segment %d", c.Channel, m.Target, j)
	}
	switch {
	case m.Target.Name == last.Backend.Name:
		return errmark.Mark(errors.Wrapf(ErrInvalid, "chain %s: pending migration targets backend %q, the last segment's", c.Channel, m.Target.Name), ErrSameBackend)
	case m.Term <= last.FirstTerm:
		return errmark.Mark(errors.Wrapf(ErrInvalid, "chain %s: pending migration's term %d is not above the last segment's first term %d", c.Channel, m.Term, last.FirstTerm), ErrStaleTerm)
	case m.At.IsZero():
		return errors.Wrapf(ErrInvalid, "chain %s: pending migration has no time", c.Channel)
	}
	return validateText("chain "+c.Channel+": pending migration's requester", m.By)
}

// Validate reports an ErrInvalid error for a backend no segment may name.
func (b Backend) Validate() error {
	if err := validateName("backend name", b.Name); err != nil {
		return err
	}
	if err := validateName("backend kind", b.Kind); err != nil {
		return err
	}
	if err := walimpls.ValidateChannelName(b.Channel); err != nil {
		return errmark.Mark(errors.Wrapf(err, "backend %s", b.Name), ErrInvalid)
	}
	if len(b.Params) == 0 {
		return nil
	}
	if len(b.Params) > MaxParamsLen {
		return errors.Wrapf(ErrInvalid, "backend %s: params of %d bytes exceed %d", b, len(b.Params), MaxParamsLen)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b.Params, &obj); err != nil || obj == nil {
		return errors.Wrapf(ErrInvalid, "backend %s: params are not a JSON object", b)
	}
	return nil
}

// validateName accepts 1 to MaxNameLen bytes of [A-Za-z0-9._-].
func validateName(what, s string) error {
	if s == "" || len(s) > MaxNameLen {
		return errors.Wrapf(ErrInvalid, "%s %q: want 1 to %d bytes", what, s, MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return errors.Wrapf(ErrInvalid, "%s %q: byte %q at %d is not one of [A-Za-z0-9._-]", what, s, b, i)
		}
	}
	return nil
}

// validateText accepts 1 to MaxNameLen bytes without control characters.
func validateText(what, s string) error {
	if s == "" || len(s) > MaxNameLen {
		return errors.Wrapf(ErrInvalid, "%s %q: want 1 to %d bytes", what, s, MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return errors.Wrapf(ErrInvalid, "%s %q: control byte %#x at %d", what, s, s[i], i)
		}
	}
	return nil
}
