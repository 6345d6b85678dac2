package kafka

import (
	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Record framing: what a record batch of one record costs on the wire
// besides the payload and the header keys and values.
const (
	// batchOverhead is the fixed header of a record batch (magic v2).
	batchOverhead = 61
	// recordFixedOverhead bounds the varints of one record: length (5),
	// attributes (1), timestamp delta (10), offset delta (5), null key (1),
	// value length (5), header count (5).
	recordFixedOverhead = 32
	// headerAllowance is reserved for the per-header length varints (2 bytes
	// per header for keys and values below 64 bytes), so that a message of
	// up to the declared limit with ordinary properties always fits.
	headerAllowance = 256
	// recordOverhead is what the declared MaxMessageBytes leaves below the
	// broker's batch limit.
	recordOverhead = batchOverhead + recordFixedOverhead + headerAllowance
)

func varintLen(v int64) int {
	u := uint64((v << 1) ^ (v >> 63))
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// wireSize returns the bytes a one-record batch holding m takes at most on
// the wire without compression.
func wireSize(m message.Message) int {
	body := 1 + 10 + 5 + 1 // attributes, timestamp delta (worst), offset delta (worst), null key
	p := m.Payload()
	body += varintLen(int64(len(p))) + len(p)
	props := m.Properties()
	body += varintLen(int64(props.Len()))
	for k, v := range props.Pairs() {
		body += varintLen(int64(len(k))) + len(k) + varintLen(int64(len(v))) + len(v)
	}
	return batchOverhead + varintLen(int64(body)) + body
}

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
