package message

import (
	"encoding/binary"
	"strconv"

	"github.com/cockroachdb/errors"
)

// stamp holds the three reserved properties every record of a WAL carries
// (kind, term, timetick) as values rather than decimal strings in the
// property map: a stamped message needs no map of its own, its header is
// read without parsing, and a backend that stores the stamp's binary form
// (AppendStamp, DecodeStamp) keeps no map per record either. A key is
// held either by the stamp or by the map, never by both; the map keeps a
// reserved value that is not the canonical decimal form of its type, so
// that such a value reads back exactly as it was written.
type stamp struct {
	has  uint8 // stampKind | stampTerm | stampTimeTick
	kind Kind
	term int64
	tt   uint64
}

const (
	stampKind uint8 = 1 << iota
	stampTerm
	stampTimeTick
	stampAll = stampKind | stampTerm | stampTimeTick
)

// stampKeys are the property keys a stamp holds, in the order of its
// flags.
var stampKeys = [...]string{KeyKind, KeyTerm, KeyTimeTick}

// stampFlag returns the flag of a stamp key, 0 for any other key.
func stampFlag(key string) uint8 {
	switch key {
	case KeyKind:
		return stampKind
	case KeyTerm:
		return stampTerm
	case KeyTimeTick:
		return stampTimeTick
	}
	return 0
}

// value returns the decimal form of the stamp's field for flag f.
func (s stamp) value(f uint8) (string, bool) {
	if s.has&f == 0 {
		return "", false
	}
	switch f {
	case stampKind:
		return strconv.FormatUint(uint64(s.kind), 10), true
	case stampTerm:
		return strconv.FormatInt(s.term, 10), true
	default:
		return strconv.FormatUint(s.tt, 10), true
	}
}

// size returns the bytes the stamp's keys and decimal values take, what
// the same properties would take in a map (Message.Size counts them so).
func (s stamp) size() int {
	n := 0
	if s.has&stampKind != 0 {
		n += len(KeyKind) + decimalLen(uint64(s.kind))
	}
	if s.has&stampTerm != 0 {
		if s.term < 0 {
			// -(MinInt64) overflows back to itself, whose uint64 is right.
			n += len(KeyTerm) + 1 + decimalLen(uint64(-s.term))
		} else {
			n += len(KeyTerm) + decimalLen(uint64(s.term))
		}
	}
	if s.has&stampTimeTick != 0 {
		n += len(KeyTimeTick) + decimalLen(s.tt)
	}
	return n
}

// decimalLen returns the number of decimal digits of u: Size is taken per
// append and per message read, where formatting to count was a visible
// share of a scan.
func decimalLen(u uint64) int {
	n := 1
	for u >= 10000 {
		u /= 10000
		n += 4
	}
	for u >= 10 {
		u /= 10
		n++
	}
	return n
}

// count returns how many properties the stamp holds.
func (s stamp) count() int {
	n := 0
	for f := stampKind; f <= stampTimeTick; f <<= 1 {
		if s.has&f != 0 {
			n++
		}
	}
	return n
}

// set stores the decimal value v of the stamp key with flag f, and
// reports false when v is not the canonical decimal form of the field's
// type (the map keeps such a value).
func (s *stamp) set(f uint8, v string) bool {
	var buf [20]byte
	switch f {
	case stampKind:
		k, err := strconv.ParseUint(v, 10, 8)
		if err != nil || string(strconv.AppendUint(buf[:0], k, 10)) != v {
			return false
		}
		s.kind = Kind(k)
	case stampTerm:
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil || string(strconv.AppendInt(buf[:0], t, 10)) != v {
			return false
		}
		s.term = t
	case stampTimeTick:
		t, err := strconv.ParseUint(v, 10, 64)
		if err != nil || string(strconv.AppendUint(buf[:0], t, 10)) != v {
			return false
		}
		s.tt = t
	default:
		return false
	}
	s.has |= f
	return true
}

// absorb moves the stamp keys of props whose values are canonical into
// s, deleting them from props; it returns props, nil once empty.
func (s *stamp) absorb(props map[string]string) map[string]string {
	if len(props) == 0 {
		return nil
	}
	for i, key := range stampKeys {
		f := uint8(1) << i
		if v, ok := props[key]; ok && s.has&f == 0 && s.set(f, v) {
			delete(props, key)
		}
	}
	if len(props) == 0 {
		return nil
	}
	return props
}

// AppendStamp appends the binary form of m's stamp to b (the format is in
// the package documentation). A backend that stores it beside the payload
// and Unstamped, and rebuilds the message with DecodeStamp, keeps no
// property map for a record that has no other properties.
func (m Message) AppendStamp(b []byte) []byte {
	s := m.stamp
	b = append(b, s.has)
	if s.has&stampKind != 0 {
		b = append(b, byte(s.kind))
	}
	if s.has&stampTerm != 0 {
		b = binary.AppendVarint(b, s.term)
	}
	if s.has&stampTimeTick != 0 {
		b = binary.AppendUvarint(b, s.tt)
	}
	return b
}

// Unstamped returns a read-only view of the properties m's stamp does not
// hold: what a backend that stores AppendStamp's bytes stores besides.
func (m Message) Unstamped() Properties { return Properties{m: m.props} }

// Stamp is a stamp decoded from its binary form (DecodeStamp), to rebuild
// the message it came with (Restore). The zero Stamp holds nothing.
type Stamp struct{ s stamp }

// DecodeStamp decodes the stamp at the front of b (AppendStamp's bytes)
// and returns its length in b, so that a backend can store the stamp in
// front of the rest of a record. Bytes that are not a stamp (unknown
// flags, a truncated field) are an ErrBadProperty error.
func DecodeStamp(b []byte) (Stamp, int, error) {
	if len(b) == 0 {
		return Stamp{}, 0, errors.Wrap(ErrBadProperty, "stamp: no bytes")
	}
	s := stamp{has: b[0]}
	if s.has&^stampAll != 0 {
		return Stamp{}, 0, errors.Wrapf(ErrBadProperty, "stamp: unknown flags %#x", s.has)
	}
	n := 1
	if s.has&stampKind != 0 {
		if len(b) < n+1 {
			return Stamp{}, 0, errors.Wrap(ErrBadProperty, "stamp: truncated kind")
		}
		s.kind = Kind(b[n])
		n++
	}
	if s.has&stampTerm != 0 {
		t, k := binary.Varint(b[n:])
		if k <= 0 {
			return Stamp{}, 0, errors.Wrap(ErrBadProperty, "stamp: truncated term")
		}
		s.term, n = t, n+k
	}
	if s.has&stampTimeTick != 0 {
		t, k := binary.Uvarint(b[n:])
		if k <= 0 {
			return Stamp{}, 0, errors.Wrap(ErrBadProperty, "stamp: truncated timetick")
		}
		s.tt, n = t, n+k
	}
	return Stamp{s: s}, n, nil
}

// Restore rebuilds the message a backend stored as its payload, this
// stamp and the Unstamped properties. Like the package's Restore, it takes
// ownership of props. Properties that hold a key the stamp holds are an
// ErrBadProperty error.
func (st Stamp) Restore(payload []byte, props map[string]string) (Message, error) {
	for i, key := range stampKeys {
		if _, ok := props[key]; ok && st.s.has&(uint8(1)<<i) != 0 {
			return Message{}, errors.Wrapf(ErrBadProperty, "stamp: property %q held twice", key)
		}
	}
	if len(props) == 0 {
		props = nil
	}
	return Message{payload: payload, props: props, stamp: st.s}, nil
}
