package adaptor

// Lend returns w as its owner hands it out: every method is w's, but
// Close returns refuse() and leaves w open, so that only the owner, which
// keeps w itself, ends it (a walmanager.Manager hands out its WALs so).
//
// It is the one wrapper that must pass on this package's optional
// interfaces (AsyncAnswerer, OpenTimer), and it lives next to them: an
// owner that lends a WAL through it writes no forwarding of its own.
func Lend(w WAL, refuse func() error) WAL {
	return lent{WAL: w, refuse: refuse}
}

type lent struct {
	WAL
	refuse func() error
}

var (
	_ AsyncAnswerer = lent{}
	_ OpenTimer     = lent{}
)

// Close returns refuse() and leaves the WAL open.
func (l lent) Close() error { return l.refuse() }

// AnswerAsync passes on the lent WAL's, which embedding alone would hide.
func (l lent) AnswerAsync(cb func(AppendResult, error), r AppendResult, err error) {
	AnswerAsync(l.WAL, cb, r, err)
}

// OpenTimes passes on the lent WAL's.
func (l lent) OpenTimes() (OpenTimes, bool) { return OpenTimesOf(l.WAL) }
