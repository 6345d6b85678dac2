package message

import (
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

// Properties is a read-only view of a message's properties.
type Properties struct {
	m map[string]string
}

// Get returns the value of key and whether it is set.
func (p Properties) Get(key string) (string, bool) {
	v, ok := p.m[key]
	return v, ok
}

// Len returns the number of properties, reserved ones included.
func (p Properties) Len() int { return len(p.m) }

// Keys returns the keys in sorted order.
func (p Properties) Keys() []string { return slices.Sorted(maps.Keys(p.m)) }

// All returns a copy of every property, reserved ones included.
func (p Properties) All() map[string]string { return maps.Clone(p.m) }

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
func (p Properties) Equal(o Properties) bool { return maps.Equal(p.m, o.m) }

// size returns the number of bytes the keys and values take.
func (p Properties) size() int {
	n := 0
	for k, v := range p.m {
		n += len(k) + len(v)
	}
	return n
}
