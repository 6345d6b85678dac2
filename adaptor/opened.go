package adaptor

import "time"

// OpenTimes are when a WAL's open passed its milestones. They travel with
// the WAL that Open returns, so that whoever holds it (a node reporting a
// move) reads them from it rather than from a side table keyed by channel.
type OpenTimes struct {
	// Fenced is when the backend's open returned: on a backend that
	// fences, every lower term was fenced by then.
	Fenced time.Time
	// Ready is when Open returned: the end of the log found, the
	// term-begin and a first watermark written.
	Ready time.Time
}

// OpenTimer is implemented by the WALs Open returns, and by WALs that
// stand for one (a chain's writer, a lent WAL). Like AsyncAnswerer, it is
// optional so that fakes need not offer it.
type OpenTimer interface {
	// OpenTimes returns the times of the open, false when there are none
	// (a WAL that did not come from Open).
	OpenTimes() (OpenTimes, bool)
}

var _ OpenTimer = (*wal)(nil)

// OpenTimesOf returns w's OpenTimes, false when w offers none.
func OpenTimesOf(w WAL) (OpenTimes, bool) {
	if t, ok := w.(OpenTimer); ok {
		return t.OpenTimes()
	}
	return OpenTimes{}, false
}

// OpenTimes implements OpenTimer.
func (w *wal) OpenTimes() (OpenTimes, bool) { return w.opened, true }
