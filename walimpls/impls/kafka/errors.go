package kafka

import (
	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/streamwal/streamwal/walimpls"
)

// isFenced reports whether err is the broker or the client telling a
// transactional producer that a newer one with its transactional id exists.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// isTooLarge reports the broker's size rejections.
func isTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// isOutOfRange reports a fetch below the log start or beyond the end.
func isOutOfRange(err error) bool { return errors.Is(err, kerr.OffsetOutOfRange) }

func fencedError(channel string, term, current int64) error {
	return &walimpls.FencedError{Channel: channel, Term: term, CurrentTerm: current}
}

// deletedError is the fence of a writer whose channel was deleted; msg says
// how the writer learnt it.
func deletedError(ch walimpls.Channel, msg string) error {
	return errors.Wrap(&walimpls.FencedError{Channel: ch.Name, Term: ch.Term, Deleted: true}, msg)
}

// errDeleting refuses an open that found the channel being deleted: the
// open waits for the topic to go and creates a new one.
var errDeleting = errors.New("the channel is being deleted")

// errorOr returns err, or a generic error when a lookup found nothing.
func errorOr(err error) error {
	if err != nil {
		return err
	}
	return errors.New("not found")
}

// kerrFor maps a Kafka error code to its kerr error.
func kerrFor(code int16) error { return kerr.ErrorForCode(code) }
