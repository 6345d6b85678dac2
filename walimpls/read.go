package walimpls

import (
	"fmt"

	"github.com/streamwal/streamwal/message"
)

type deliverKind uint8

const (
	deliverAll deliverKind = iota
	deliverLatest
	deliverStartFrom
	deliverStartAfter
	deliverTail
)

// DeliverPolicy says where a scanner starts. The zero value is DeliverAll.
type DeliverPolicy struct {
	kind deliverKind
	id   message.ID
	n    int // DeliverTail
}

// DeliverAll starts at the first message still kept.
func DeliverAll() DeliverPolicy { return DeliverPolicy{kind: deliverAll} }

// DeliverLatest delivers only messages appended after Read returns.
func DeliverLatest() DeliverPolicy { return DeliverPolicy{kind: deliverLatest} }

// DeliverStartFrom starts at id, inclusive.
func DeliverStartFrom(id message.ID) DeliverPolicy {
	return DeliverPolicy{kind: deliverStartFrom, id: id}
}

// DeliverStartAfter starts right after id, exclusive.
func DeliverStartAfter(id message.ID) DeliverPolicy {
	return DeliverPolicy{kind: deliverStartAfter, id: id}
}

// DeliverTail starts near the end: at a position from which at least the
// last n messages stored when Read is called are delivered (every message
// kept, when fewer are kept). A backend may start earlier than exactly n
// messages from the end, never later. n must be at least 1.
func DeliverTail(n int) DeliverPolicy { return DeliverPolicy{kind: deliverTail, n: n} }

// Tail returns n and true for a DeliverTail policy.
func (p DeliverPolicy) Tail() (n int, ok bool) { return p.n, p.kind == deliverTail }

// IsAll reports whether p is DeliverAll.
func (p DeliverPolicy) IsAll() bool { return p.kind == deliverAll }

// IsLatest reports whether p is DeliverLatest.
func (p DeliverPolicy) IsLatest() bool { return p.kind == deliverLatest }

// StartID returns the position of a StartFrom or StartAfter policy, whether
// the position itself is included, and false for All and Latest.
func (p DeliverPolicy) StartID() (id message.ID, inclusive bool, ok bool) {
	switch p.kind {
	case deliverStartFrom:
		return p.id, true, true
	case deliverStartAfter:
		return p.id, false, true
	}
	return message.ID{}, false, false
}

func (p DeliverPolicy) String() string {
	switch p.kind {
	case deliverAll:
		return "all"
	case deliverLatest:
		return "latest"
	case deliverStartFrom:
		return "start-from(" + p.id.String() + ")"
	case deliverStartAfter:
		return "start-after(" + p.id.String() + ")"
	case deliverTail:
		return fmt.Sprintf("tail(%d)", p.n)
	}
	return fmt.Sprintf("policy(%d)", p.kind)
}

// ReadOption configures a scanner.
type ReadOption struct {
	// Name identifies the scanner in logs and metrics.
	Name string
	// DeliverPolicy says where to start; the zero value is DeliverAll.
	DeliverPolicy DeliverPolicy
	// ReadAheadBytes bounds how many bytes the backend buffers ahead of the
	// consumer; 0 takes the backend's default.
	ReadAheadBytes int
}

// Scanner delivers messages of one WAL in order: a backend's in ID order,
// the adaptor's (adaptor.WAL.Read) in strictly increasing timetick order.
type Scanner interface {
	// Chan delivers messages; it is closed when the scanner ends.
	Chan() <-chan message.Immutable
	// Done is closed when the scanner has ended and released everything.
	Done() <-chan struct{}
	// Error returns why the scanner ended: nil after Close (and while it
	// runs), the cause otherwise (for example ErrPositionGone). Valid
	// after Done is closed.
	Error() error
	// Close stops the scanner and waits until it has released everything.
	// It is idempotent and returns nil.
	Close() error
}

// BatchScanner delivers what a Scanner does, several messages at a time
// (BatchReader, adaptor.WAL.ReadBatches).
type BatchScanner interface {
	// Batches delivers non-empty slices of messages, in the order Chan
	// would deliver them, within and across slices, without gaps; it is
	// closed when the scanner ends. A slice belongs to the receiver once
	// received: the scanner neither reads nor changes it again, so the
	// receiver may keep, reorder or clear it.
	Batches() <-chan []message.Immutable
	// Done, Error and Close are those of Scanner.
	Done() <-chan struct{}
	Error() error
	Close() error
}
