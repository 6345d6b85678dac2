package adaptor

// AsyncAnswerer is implemented by the WALs Open returns. A wrapper of WAL
// that decides an AppendAsync itself (it refuses the message before the
// WAL sees it, say) hands the answer to AnswerAsync, so that its callbacks
// keep the promises of WAL.AppendAsync: one at a time, on the WAL's
// callback goroutine, in answer order, each waited for by Close.
//
// It is a separate interface, not a method of WAL, so that WALs written
// elsewhere (fakes, other implementations) need not offer it. A wrapper
// that embeds a WAL does not pass it on by embedding alone, which is why
// what layers add around a WAL are options and hooks of the WAL
// (Options.OnFirstAppend, OpenTimes, Lend) rather than wrappers; a WAL
// that stands for another (a chain's writer, routing to its last
// segment's) implements it with the function AnswerAsync on that WAL.
type AsyncAnswerer interface {
	// AnswerAsync calls cb(r, err) as AppendAsync calls back an append
	// answered now: on the WAL's callback goroutine, after the callbacks
	// already queued there, and Close waits for it; on the caller's own
	// goroutine, before AnswerAsync returns, when the WAL is closed. A nil
	// cb is not called.
	AnswerAsync(cb func(AppendResult, error), r AppendResult, err error)
}

var _ AsyncAnswerer = (*wal)(nil)

// AnswerAsync calls cb(r, err) through w's AsyncAnswerer, and on the
// caller's goroutine, before it returns, when w has none. The latter keeps
// the promises that need no callback goroutine of w's: cb runs once, Close
// need not wait for it, and nothing is left running; it may then run while
// one of w's callbacks does. A nil cb is not called.
func AnswerAsync(w WAL, cb func(AppendResult, error), r AppendResult, err error) {
	if cb == nil {
		return
	}
	if a, ok := w.(AsyncAnswerer); ok {
		a.AnswerAsync(cb, r, err)
		return
	}
	cb(r, err)
}

// AnswerAsync implements AsyncAnswerer, as AppendAsync answers an append
// it refuses.
func (w *wal) AnswerAsync(cb func(AppendResult, error), r AppendResult, err error) {
	if cb == nil {
		return
	}
	w.mu.Lock()
	if w.closed {
		// Close may be waiting for wg already: answer here.
		w.mu.Unlock()
		cb(r, err)
		return
	}
	w.wg.Add(1) // done once cb has run; Close waits for it
	w.mu.Unlock()
	w.callbacks.Post(func() {
		defer w.wg.Done()
		cb(r, err)
	})
}
