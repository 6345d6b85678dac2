package kafka

import (
	"github.com/streamwal/streamwal/message"
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
