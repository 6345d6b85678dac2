package pulsar

import (
	"strings"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// frameOverhead is what a message's frame needs besides its payload and
// the bytes of its properties: the message metadata (producer name,
// sequence id, publish time, the protobuf framing of every property), the
// batch envelope and the single-message metadata of a batched message. A
// message of the declared size with properties of ordinary length fits;
// the client's own check (ErrMessageTooLarge) backs this estimate up.
const frameOverhead = 16 << 10

// declaredMax is Capabilities.MaxMessageBytes for a broker whose maximum
// message size is brokerMax. A message's properties travel twice in its
// frame: pulsar-client-go v0.19.0 copies the properties of a batch's first
// message into the batch's metadata, besides the message's own metadata
// inside the batch. A message of the declared size fits whether its bytes
// are payload or properties.
func declaredMax(brokerMax int) int { return (brokerMax - frameOverhead) / 2 }

// defaultBrokerMaxMessage is Pulsar's default maxMessageSize, used when a
// broker announces none.
const defaultBrokerMaxMessage = 5 << 20

// isFencedErr reports the client telling a producer that a newer exclusive
// producer owns the topic: ErrProducerFenced for the sends pending when it
// happened, ErrProducerClosed for later ones (the client closes a fenced
// producer itself).
func isFencedErr(err error) bool {
	return errors.Is(err, pulsar.ErrProducerFenced) || errors.Is(err, pulsar.ErrProducerClosed) ||
		strings.Contains(err.Error(), "ProducerFenced")
}

// isTooLarge reports the client's size rejections.
func isTooLarge(err error) bool {
	return errors.Is(err, pulsar.ErrMessageTooLarge) || errors.Is(err, pulsar.ErrMetaTooLarge)
}

// goneText is how a broker refuses a reader whose start position was
// deleted by retention or trimming (the in-repo test broker,
// internal/pulsartest, answers NotAllowedError with this text). A Java
// broker instead moves such a reader to the first entry left; the scanner's
// gap check and the recorded truncation point catch that case.
const goneText = "start position trimmed"

// isGone reports a reader refused because its start position is gone.
func isGone(err error) bool { return err != nil && strings.Contains(err.Error(), goneText) }

func fencedError(channel string, term, current int64) error {
	return &walimpls.FencedError{Channel: channel, Term: term, CurrentTerm: current}
}

// deletedError is the error of a writer whose channel was deleted.
func deletedError(channel string, term int64) error {
	return &walimpls.FencedError{Channel: channel, Term: term, Deleted: true}
}

// goneDeleted is why a deleted channel's scanners end and its reads fail.
func goneDeleted(channel string) error {
	return errors.Wrapf(walimpls.ErrPositionGone, "pulsar: channel %q was deleted", channel)
}

// isTopicNotFound reports the broker refusing a topic that does not exist
// (auto-creation off); the client's errors carry the server error's name.
func isTopicNotFound(err error) bool {
	return err != nil && (errors.Is(err, pulsar.ErrTopicNotfound) || strings.Contains(err.Error(), "TopicNotFound"))
}
