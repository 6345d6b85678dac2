package adaptor

import "github.com/streamwal/streamwal/message"

// DeliverKind names where a DeliverPolicy starts.
type DeliverKind uint8

// The kinds of DeliverPolicy, one per constructor.
const (
	KindAll DeliverKind = iota
	KindLatest
	KindStartFrom
	KindStartAfter
	KindFromTimeTick
	KindAfter
)

// DeliverSpec is a DeliverPolicy taken apart: what a layer that reads
// something other than one backend log with the same policies (a chain of
// segments, package chainread) needs to translate it.
type DeliverSpec struct {
	Kind DeliverKind
	// ID is the position of StartFrom, StartAfter and After.
	ID message.ID
	// TimeTick is the timetick of FromTimeTick and After.
	TimeTick uint64
}

// Spec takes p apart.
func (p DeliverPolicy) Spec() DeliverSpec {
	switch {
	case p.byTTOnly:
		return DeliverSpec{Kind: KindFromTimeTick, TimeTick: p.fromTT}
	case p.backend.IsLatest():
		return DeliverSpec{Kind: KindLatest}
	}
	id, inclusive, ok := p.backend.StartID()
	switch {
	case !ok:
		return DeliverSpec{Kind: KindAll}
	case p.afterTT != 0:
		return DeliverSpec{Kind: KindAfter, ID: id, TimeTick: p.afterTT}
	case inclusive:
		return DeliverSpec{Kind: KindStartFrom, ID: id}
	}
	return DeliverSpec{Kind: KindStartAfter, ID: id}
}
