package cursor

import (
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// MaxIDLen bounds the backend ID of a position (and a seal's End).
const MaxIDLen = 256

// Position is a place in a channel's chain: a segment and a message ID of
// that segment's backend, in the backend's marshaled form. The zero
// Position is "no position".
type Position struct {
	Segment uint64
	ID      string
}

// IsZero reports whether p is the zero Position.
func (p Position) IsZero() bool { return p.Segment == 0 && p.ID == "" }

// String returns the one string of p (see the grammar in doc.go): a bare ID for segment 0, "s<segment>/<id>" otherwise.
// ParsePosition decodes it. A position with an empty ID in a segment other
// than 0 has no valid string; its String does not parse.
func (p Position) String() string {
	if p.Segment == 0 && !strings.HasPrefix(p.ID, "s") {
		return p.ID
	}
	return "s" + strconv.FormatUint(p.Segment, 10) + "/" + p.ID
}

// Validate reports an error matching message.ErrCorruptID for a position
// with no string form: an empty ID outside the zero Position, or an ID
// outside the grammar.
func (p Position) Validate() error {
	if p.IsZero() {
		return nil
	}
	return ValidateID("chain position", p.ID)
}

// ParsePosition decodes Position.String's form; "" is the zero Position.
// Anything else, also a non-canonical form of a valid position ("s0/12",
// "s01/12"), is an error matching message.ErrCorruptID.
func ParsePosition(s string) (Position, error) {
	if s == "" {
		return Position{}, nil
	}
	if !strings.HasPrefix(s, "s") {
		if err := ValidateID("chain position", s); err != nil {
			return Position{}, err
		}
		return Position{ID: s}, nil
	}
	segText, id, ok := strings.Cut(s[1:], "/")
	if !ok {
		return Position{}, errors.Wrapf(message.ErrCorruptID, "chain position %q: no '/' after the segment", s)
	}
	seg, err := strconv.ParseUint(segText, 10, 64)
	if err != nil || strconv.FormatUint(seg, 10) != segText {
		return Position{}, errors.Wrapf(message.ErrCorruptID, "chain position %q: segment %q is not a decimal index", s, segText)
	}
	if err := ValidateID("chain position "+strconv.Quote(s), id); err != nil {
		return Position{}, err
	}
	p := Position{Segment: seg, ID: id}
	if p.String() != s {
		return Position{}, errors.Wrapf(message.ErrCorruptID, "chain position %q: write it %q", s, p.String())
	}
	return p, nil
}

// ValidateID reports an error matching message.ErrCorruptID for a backend
// ID no position may hold: empty, longer than MaxIDLen, or with a byte
// outside printable ASCII (space excluded). what names the ID in the
// error.
func ValidateID(what, id string) error {
	switch {
	case id == "":
		return errors.Wrapf(message.ErrCorruptID, "%s: empty id", what)
	case len(id) > MaxIDLen:
		return errors.Wrapf(message.ErrCorruptID, "%s: id of %d bytes exceeds %d", what, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return errors.Wrapf(message.ErrCorruptID, "%s: id %q: byte %#x at %d is not printable ascii", what, id, id[i], i)
		}
	}
	return nil
}
