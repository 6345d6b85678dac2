package message

import "strconv"

// Kind says what a message is for. The zero Kind is KindData.
type Kind uint8

const (
	// KindData is a message written by a user.
	KindData Kind = iota
	// KindTimeTick is a watermark: every message with a timetick at or below
	// the watermark's own is durable.
	KindTimeTick
	// KindTermBegin is written first by every new owner of a channel. It
	// carries the owner's term and fences lower terms for readers.
	KindTermBegin
	// KindPart is one part of a message split because it exceeded the
	// backend's size limit.
	KindPart
	kindCount
)

var kindNames = [...]string{"data", "timetick", "term-begin", "part"}

// String returns the kind's name.
func (k Kind) String() string {
	if k < kindCount {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is one of the declared kinds.
func (k Kind) Valid() bool { return k < kindCount }
