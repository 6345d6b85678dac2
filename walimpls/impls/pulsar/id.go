package pulsar

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// msgID is a message's position in a channel topic. It implements
// message.IDValue.
//
// Positions order by ledger, then entry, then batch index (-1, a message
// sent without batching, sorts before index 0), then partition (constant
// within a topic: 0 for the non-partitioned topics of this backend).
// batchSize is kept when known (0 otherwise) to check that a scanner
// received every message of a batch; it is neither compared nor
// marshalled, so the ID of an append and the ID a reader sees are equal and
// marshal to the same string.
//
// Marshal gives "ledger:entry", then ":batch" when the batch index is not
// -1, then "@partition" when the partition is not 0; every number decimal,
// without sign or leading zero ("42:7", "42:7:3", "42:7:3@1").
type msgID struct {
	ledger    int64
	entry     int64
	batch     int32
	partition int32
	batchSize int32
}

var _ message.IDValue = msgID{}

// Backend implements message.IDValue.
func (msgID) Backend() string { return Name }

// Compare implements message.IDValue.
func (a msgID) Compare(o message.IDValue) int {
	b, ok := o.(msgID)
	if !ok {
		return 1 // never mixed: another value type with our backend name
	}
	return a.compare(b)
}

func (a msgID) compare(b msgID) int {
	if c := cmp.Compare(a.ledger, b.ledger); c != 0 {
		return c
	}
	if c := cmp.Compare(a.entry, b.entry); c != 0 {
		return c
	}
	if c := cmp.Compare(a.batch, b.batch); c != 0 {
		return c
	}
	return cmp.Compare(a.partition, b.partition)
}

// Marshal implements message.IDValue.
func (a msgID) Marshal() string {
	b := make([]byte, 0, 32)
	b = strconv.AppendInt(b, a.ledger, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, a.entry, 10)
	if a.batch != -1 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(a.batch), 10)
	}
	if a.partition != 0 {
		b = append(b, '@')
		b = strconv.AppendInt(b, int64(a.partition), 10)
	}
	return string(b)
}

func (a msgID) String() string { return a.Marshal() }

// unmarshalID decodes what Marshal produced; anything else is
// message.ErrCorruptID.
func unmarshalID(s string) (message.ID, error) {
	v, err := parseID(s)
	if err != nil {
		return message.ID{}, fmt.Errorf("pulsar id %q: %w: %w", s, err, message.ErrCorruptID)
	}
	return message.NewID(v), nil
}

func parseID(s string) (msgID, error) {
	id := msgID{batch: -1}
	rest := s
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		p, err := parseUint(rest[i+1:], 31)
		if err != nil || p == 0 {
			return msgID{}, errors.New("bad partition")
		}
		id.partition = int32(p)
		rest = rest[:i]
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 2 && len(parts) != 3 {
		return msgID{}, errors.New("want ledger:entry[:batch][@partition]")
	}
	l, err := parseUint(parts[0], 63)
	if err != nil {
		return msgID{}, errors.Wrap(err, "ledger")
	}
	e, err := parseUint(parts[1], 63)
	if err != nil {
		return msgID{}, errors.Wrap(err, "entry")
	}
	id.ledger, id.entry = int64(l), int64(e)
	if len(parts) == 3 {
		b, err := parseUint(parts[2], 31)
		if err != nil {
			return msgID{}, errors.Wrap(err, "batch index")
		}
		id.batch = int32(b)
	}
	return id, nil
}

// parseUint parses a canonical decimal below 2^bits: digits only, no
// leading zero.
func parseUint(s string, bits int) (uint64, error) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, errors.New("not a canonical decimal")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a decimal")
		}
	}
	return strconv.ParseUint(s, 10, bits)
}

// idOf returns the msgID of id, false for the zero ID or another backend's.
func idOf(id message.ID) (msgID, bool) {
	v, ok := id.Value().(msgID)
	return v, ok
}

// fromPulsar converts the client's message id.
func fromPulsar(p pulsar.MessageID) msgID {
	return msgID{ledger: p.LedgerID(), entry: p.EntryID(), batch: p.BatchIdx(), partition: max(p.PartitionIdx(), 0), batchSize: p.BatchSize()}
}

// lastOf converts a GET_LAST_MESSAGE_ID answer: ok is false when the
// topic holds no message (entry -1).
func lastOf(p pulsar.MessageID) (msgID, bool) {
	id := fromPulsar(p)
	if id.entry < 0 {
		return msgID{}, false
	}
	return id, true
}

// toPulsar converts to the client's message id.
func (a msgID) toPulsar() pulsar.MessageID {
	return pulsar.NewMessageID(a.ledger, a.entry, a.batch, a.partition)
}

// follows reports whether next is the message right after prev in a topic:
// the next message of prev's batch, or else the first message of the next
// entry of prev's ledger or of the first entry of a later ledger (entry ids
// are consecutive within a ledger and start at 0; a topic moves to a new
// ledger when it is reloaded). When prev's batch size is unknown, both the
// next index of its batch and the next entry are accepted.
func follows(prev, next msgID) bool {
	if prev.batch >= 0 && (prev.batchSize == 0 || prev.batch+1 < prev.batchSize) {
		if next == (msgID{ledger: prev.ledger, entry: prev.entry, batch: prev.batch + 1, partition: prev.partition, batchSize: next.batchSize}) {
			return true
		}
		if prev.batchSize != 0 {
			return false
		}
	}
	if next.batch > 0 {
		return false
	}
	if next.ledger == prev.ledger {
		return next.entry == prev.entry+1
	}
	return next.ledger > prev.ledger && next.entry == 0
}
