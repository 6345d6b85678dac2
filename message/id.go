package message

import (
	"fmt"
	"strconv"

	"github.com/cockroachdb/errors"
)

// IDValue is what a backend implements to identify its messages.
type IDValue interface {
	// Backend names the backend that issued the value; values of different
	// backends are never compared with each other.
	Backend() string
	// Compare returns -1, 0 or +1. It is only called with a value whose
	// Backend is the same as the receiver's.
	Compare(other IDValue) int
	// Marshal returns a compact string the backend can decode again.
	Marshal() string
}

// ID identifies a message within one channel of one backend. The zero ID
// identifies nothing (IsZero) and is not comparable with any other.
type ID struct {
	v IDValue
}

// NewID wraps a backend's ID value.
func NewID(v IDValue) ID { return ID{v: v} }

// IsZero reports whether the ID identifies nothing.
func (id ID) IsZero() bool { return id.v == nil }

// Value returns the backend's value, for the backend that issued it.
func (id ID) Value() IDValue { return id.v }

// Backend names the backend that issued the ID, or "" for the zero ID.
func (id ID) Backend() string {
	if id.v == nil {
		return ""
	}
	return id.v.Backend()
}

// Compare orders id against o: -1, 0 or +1. IDs of different backends, or a
// zero ID, give ErrIncomparableID.
func (id ID) Compare(o ID) (int, error) {
	if id.v == nil || o.v == nil {
		return 0, errors.Wrap(ErrIncomparableID, "zero id")
	}
	if a, b := id.v.Backend(), o.v.Backend(); a != b {
		return 0, errors.Wrapf(ErrIncomparableID, "backend %q vs %q", a, b)
	}
	return id.v.Compare(o.v), nil
}

// LT reports whether id is before o; false when they are not comparable.
func (id ID) LT(o ID) bool {
	c, err := id.Compare(o)
	return err == nil && c < 0
}

// LTE reports whether id is before or equal to o; false when they are not
// comparable.
func (id ID) LTE(o ID) bool {
	c, err := id.Compare(o)
	return err == nil && c <= 0
}

// EQ reports whether id and o are the same position; false when they are not
// comparable.
func (id ID) EQ(o ID) bool {
	c, err := id.Compare(o)
	return err == nil && c == 0
}

// Marshal returns the compact string form of the ID ("" for the zero ID).
func (id ID) Marshal() string {
	if id.v == nil {
		return ""
	}
	return id.v.Marshal()
}

// String is Marshal prefixed by the backend, for logs.
func (id ID) String() string {
	if id.v == nil {
		return "<none>"
	}
	return id.v.Backend() + ":" + id.v.Marshal()
}

// SeqID is an ID value that is a sequence number, for backends whose
// positions are plain integers (a log offset, a global sequence).
type SeqID struct {
	backend string
	seq     int64
}

// NewSeqID returns the ID of position seq in a backend's log.
func NewSeqID(backend string, seq int64) ID { return NewID(SeqID{backend: backend, seq: seq}) }

// Seq returns the sequence number.
func (s SeqID) Seq() int64 { return s.seq }

// Backend implements IDValue.
func (s SeqID) Backend() string { return s.backend }

// Compare implements IDValue.
func (s SeqID) Compare(o IDValue) int {
	os, ok := o.(SeqID)
	if !ok {
		// Same backend name but another value type: order by type so the
		// result is at least stable. Backends never mix them.
		return 1
	}
	switch {
	case s.seq < os.seq:
		return -1
	case s.seq > os.seq:
		return 1
	}
	return 0
}

// Marshal implements IDValue: the decimal sequence number.
func (s SeqID) Marshal() string { return strconv.FormatInt(s.seq, 10) }

// UnmarshalSeqID decodes a SeqID marshalled by backend. Negative numbers,
// signs, spaces and anything but decimal digits are ErrCorruptID.
func UnmarshalSeqID(backend, s string) (ID, error) {
	if s == "" || len(s) > 19 {
		return ID{}, errors.Wrapf(ErrCorruptID, "%s id %q", backend, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return ID{}, errors.Wrapf(ErrCorruptID, "%s id %q", backend, s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return ID{}, errors.Wrapf(ErrCorruptID, "%s id %q has a leading zero", backend, s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return ID{}, errors.WithStack(fmt.Errorf("%s id %q: %w: %w", backend, s, err, ErrCorruptID))
	}
	return NewSeqID(backend, v), nil
}

// SeqOf returns the sequence number of an ID issued by backend, and an
// ErrIncomparableID error for any other ID.
func SeqOf(backend string, id ID) (int64, error) {
	s, ok := id.v.(SeqID)
	if !ok || s.backend != backend {
		return 0, errors.Wrapf(ErrIncomparableID, "id %s is not a %s id", id, backend)
	}
	return s.seq, nil
}
