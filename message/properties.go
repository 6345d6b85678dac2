package message

import (
	"iter"
	"maps"
	"slices"
	"strings"
)

// ReservedPrefix starts every property key that the WAL itself uses.
const ReservedPrefix = "_"

// Reserved property keys. They are short because every message carries some
// of them.
const (
	KeyKind          = "_k"  // Kind, decimal
	KeyTerm          = "_t"  // term of the writer, decimal int64
	KeyTimeTick      = "_tt" // hybrid timetick, decimal uint64
	KeyVChannel      = "_vc" // virtual channel name
	KeyPartHeader    = "_ph" // split-part header, see the adaptor
	KeyLastConfirmed = "_lc" // marshalled ID of the last confirmed message
	KeyIdempotency   = "_ik" // the writer client's idempotency key
)

// IsReserved reports whether key is a reserved property key.
func IsReserved(key string) bool { return strings.HasPrefix(key, ReservedPrefix) }

// Properties is a read-only view of a message's properties, the reserved
// ones its stamp holds included (in their decimal form).
type Properties struct {
	m map[string]string
	s stamp
}

// Get returns the value of key and whether it is set.
func (p Properties) Get(key string) (string, bool) {
	if f := stampFlag(key); f != 0 && p.s.has&f != 0 {
		return p.s.value(f)
	}
	v, ok := p.m[key]
	return v, ok
}

// Len returns the number of properties, reserved ones included.
func (p Properties) Len() int { return len(p.m) + p.s.count() }

// Keys returns the keys in sorted order.
func (p Properties) Keys() []string {
	if p.Len() == 0 {
		return nil
	}
	keys := slices.AppendSeq(make([]string, 0, p.Len()), maps.Keys(p.m))
	for i, key := range stampKeys {
		if p.s.has&(uint8(1)<<i) != 0 {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

// Pairs yields every property, reserved ones included, in no particular
// order.
func (p Properties) Pairs() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := range stampKeys {
			if v, ok := p.s.value(uint8(1) << i); ok && !yield(stampKeys[i], v) {
				return
			}
		}
		for k, v := range p.m {
			if !yield(k, v) {
				return
			}
		}
	}
}

// All returns a copy of every property, reserved ones included (nil when
// there are none).
func (p Properties) All() map[string]string {
	if p.Len() == 0 {
		return nil
	}
	return maps.Collect(p.Pairs())
}

// User returns a copy of the properties whose keys are not reserved.
func (p Properties) User() map[string]string {
	out := make(map[string]string, len(p.m))
	for k, v := range p.m {
		if !IsReserved(k) {
			out[k] = v
		}
	}
	return out
}

// Equal reports whether p and o hold the same keys and values.
func (p Properties) Equal(o Properties) bool {
	if p.Len() != o.Len() {
		return false
	}
	for k, v := range p.Pairs() {
		if w, ok := o.Get(k); !ok || w != v {
			return false
		}
	}
	return true
}

// size returns the number of bytes the keys and values take.
func (p Properties) size() int { return p.s.size() + mapSize(p.m) }

func mapSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}
