package walmanager

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/adaptor"
)

// lend is how GetAvailableWAL hands out w: Close disabled. A user closing
// it would make the manager's view of the channel a lie (it would still
// report it available and hand it out), so only the manager, through
// Remove or Close, ends it. adaptor.Lend keeps w's optional interfaces
// (a vchannel view answers its refused appends on w's callback goroutine).
func lend(w adaptor.WAL) adaptor.WAL {
	return adaptor.Lend(w, func() error {
		ch := w.Channel()
		return errors.Wrapf(ErrNotOwner, "close of channel %q at term %d: remove it through the manager", ch.Name, ch.Term)
	})
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
