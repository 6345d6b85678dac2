package walmanager

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/internal/errmark"
)

// errCallDidNotReturn is the cause of a failure whose call into the opener
// or a WAL never returned: it ended its goroutine with runtime.Goexit. That
// is what a mock built with NewMockX(t) does when the manager makes a call
// the test set no expectation for: t.Errorf names the call, then t.FailNow
// exits the calling goroutine.
var errCallDidNotReturn = errors.New("walmanager: call did not return")

// callOut runs f, a call into the opener or a WAL, on a goroutine of its
// own and reports whether it returned. A call that instead ends with
// runtime.Goexit then fails like any error would, where it used to take the
// driver goroutine with it: the lock the driver held was never released
// and the waiting callers (Open, Remove, GetAvailableWAL, Close) hung until
// go test's timeout, hiding the mock's message naming the call. A panic is
// not recovered: it still crashes the program with its message.
func callOut(f func()) (returned bool) {
	done := make(chan bool, 1)
	go func() {
		ok := false
		defer func() { done <- ok }()
		f()
		ok = true
	}()
	return <-done
}

// didNotReturn is the error of a call (named like "the WAL's Available()")
// that did not return.
func didNotReturn(call, name string, term int64) error {
	return errmark.Mark(errors.Newf("walmanager: channel %q at term %d: %s did not return: it ended its goroutine "+
		"with runtime.Goexit (a mock's t.FailNow on a call the test set no expectation for?)", name, term, call), errCallDidNotReturn)
}
