package walmanager

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
)

// ownedWAL is what GetAvailableWAL hands out: the manager's WAL with Close
// disabled. A user closing it would make the manager's view of the channel
// a lie (it would still report it available and hand it out), so only the
// manager, through Remove or Close, ends it.
type ownedWAL struct {
	adaptor.WAL
}

var _ adaptor.AsyncAnswerer = ownedWAL{}

// Close does nothing and returns ErrNotOwner.
func (w ownedWAL) Close() error {
	ch := w.Channel()
	return errors.Wrapf(ErrNotOwner, "close of channel %q at term %d: remove it through the manager", ch.Name, ch.Term)
}

// unavailableCause is why w's Available channel closed: the WAL's Err(),
// or a generic reason when it reports none (yet) or its Err() did not
// return (see callOut).
func unavailableCause(w adaptor.WAL, name string, term int64) error {
	var err error
	if !callOut(func() { err = w.Err() }) {
		return didNotReturn("the WAL's Err()", name, term)
	}
	if err != nil {
		return err
	}
	return errWALUnavailable
}

// AnswerAsync forwards to the WAL's adaptor.AsyncAnswerer, which embedding
// alone would hide: a vchannel view over a WAL the manager handed out then
// answers its refused appends on the WAL's callback goroutine, like the
// WAL's own.
func (w ownedWAL) AnswerAsync(cb func(adaptor.AppendResult, error), r adaptor.AppendResult, err error) {
	adaptor.AnswerAsync(w.WAL, cb, r, err)
}
