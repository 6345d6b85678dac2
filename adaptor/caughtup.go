package adaptor

import (
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// CaughtUp reports whether m, a message a scanner delivered, shows that the
// scanner has delivered everything acknowledged before tail was taken
// (WAL.Tail): a watermark at or above tail's timetick.
func CaughtUp(m message.Immutable, tail cursor.Checkpoint) bool {
	if m.Kind() != message.KindTimeTick {
		return false
	}
	tt, ok := m.TimeTick()
	return ok && tt >= tail.TimeTick
}
