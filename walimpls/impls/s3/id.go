package s3

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// pos is a message's place in a channel: the object (epoch, slot) and its
// index there. It is the value of the backend's message IDs.
type pos struct {
	epoch, slot uint64
	index       uint32
}

var _ message.IDValue = pos{}

func (p pos) id() message.ID { return message.NewID(p) }

// Backend implements message.IDValue.
func (p pos) Backend() string { return Name }

// Compare implements message.IDValue: by epoch, then slot, then index.
func (p pos) Compare(o message.IDValue) int {
	q, ok := o.(pos)
	if !ok {
		return 1
	}
	return p.cmp(q)
}

func (p pos) cmp(q pos) int {
	switch {
	case p.epoch != q.epoch:
		return cmpU(p.epoch, q.epoch)
	case p.slot != q.slot:
		return cmpU(p.slot, q.slot)
	}
	return cmpU(uint64(p.index), uint64(q.index))
}

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

func (p pos) less(q pos) bool { return p.cmp(q) < 0 }

// Marshal implements message.IDValue: "<epoch>.<slot>.<index>".
func (p pos) Marshal() string {
	return strconv.FormatUint(p.epoch, 10) + "." + strconv.FormatUint(p.slot, 10) + "." + strconv.FormatUint(uint64(p.index), 10)
}

func (p pos) String() string { return p.Marshal() }

// unmarshalID decodes the canonical form only: three decimals without sign
// or leading zeros, separated by dots.
func unmarshalID(s string) (message.ID, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return message.ID{}, errors.Wrapf(message.ErrCorruptID, "%s id %q", Name, s)
	}
	var v [3]uint64
	for i, part := range parts {
		n, err := canonicalUint(part, 64)
		if err != nil {
			return message.ID{}, errors.WithStack(fmt.Errorf("%s id %q: %w: %w", Name, s, err, message.ErrCorruptID))
		}
		v[i] = n
	}
	if v[2] > 1<<32-1 {
		return message.ID{}, errors.Wrapf(message.ErrCorruptID, "%s id %q: index out of range", Name, s)
	}
	return pos{epoch: v[0], slot: v[1], index: uint32(v[2])}.id(), nil
}

func canonicalUint(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.Newf("%q is not a decimal", s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.Newf("%q has a leading zero", s)
	}
	return strconv.ParseUint(s, 10, bits)
}

// posOf returns the position of an ID of this backend.
func posOf(id message.ID) (pos, error) {
	p, ok := id.Value().(pos)
	if !ok {
		return pos{}, errors.Wrapf(message.ErrIncomparableID, "id %s is not an %s id", id, Name)
	}
	return p, nil
}
