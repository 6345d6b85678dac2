package local

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// errBadBody is the cause of every body that does not decode. A body inside
// a frame with a valid CRC that does not decode was written by something
// that is not this package.
var errBadBody = errors.New("malformed record body")

// bodyReader decodes the varint-based bodies; the first failure sticks.
type bodyReader struct {
	b   []byte
	bad bool
}

func (r *bodyReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *bodyReader) varint() int64 {
	if r.bad {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *bodyReader) bytes() []byte {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *bodyReader) err(what string) error {
	if r.bad {
		return errors.Wrapf(errBadBody, "%s", what)
	}
	return nil
}

// encodeMessage encodes the body of a message frame: the message's stamp,
// its other properties, then its payload.
func encodeMessage(m message.Message) []byte {
	props := m.Unstamped()
	n := stampMaxBytes + binary.MaxVarintLen64 + len(m.Payload())
	for k, v := range props.Pairs() {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	b := m.AppendStamp(make([]byte, 0, n))
	return append(appendProperties(b, props), m.Payload()...)
}

// appendProperties appends the properties part of a message body: uvarint
// n, then n times uvarint len+key, uvarint len+value.
func appendProperties(b []byte, props message.Properties) []byte {
	b = binary.AppendUvarint(b, uint64(props.Len()))
	for k, v := range props.Pairs() {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// stampMaxBytes bounds a stamp's binary form: flags, kind, two varints.
const stampMaxBytes = 2 + 2*binary.MaxVarintLen64

// decodeMessage decodes the body of a message frame of type typ. The
// properties are copied; the payload aliases body unless copyPayload is
// set.
func decodeMessage(typ frameType, body []byte, copyPayload bool) (message.Message, error) {
	var (
		st message.Stamp
		n  int
	)
	if typ == typeMessage {
		var err error
		if st, n, err = message.DecodeStamp(body); err != nil {
			return message.Message{}, errors.WithStack(fmt.Errorf("message stamp: %w: %w", err, errBadBody))
		}
	}
	r := bodyReader{b: body[n:]}
	count := r.uvarint()
	// Each property takes at least two bytes, which bounds count before it
	// is used as a capacity.
	if count > uint64(len(r.b))/2 {
		return message.Message{}, errors.Wrapf(errBadBody, "message: %d properties in %d bytes", count, len(r.b))
	}
	var props map[string]string
	if count > 0 {
		props = make(map[string]string, count)
	}
	for i := uint64(0); i < count && !r.bad; i++ {
		k := r.bytes()
		v := r.bytes()
		props[string(k)] = string(v)
	}
	if err := r.err("message properties"); err != nil {
		return message.Message{}, err
	}
	if uint64(len(props)) != count {
		return message.Message{}, errors.Wrap(errBadBody, "message: duplicate property key")
	}
	var payload []byte
	if len(r.b) > 0 {
		payload = r.b[:len(r.b):len(r.b)]
		if copyPayload {
			payload = slices.Clone(r.b)
		}
	}
	if typ != typeMessage {
		return message.Restore(payload, props), nil
	}
	m, err := st.Restore(payload, props)
	if err != nil {
		return message.Message{}, errors.WithStack(fmt.Errorf("message: %w: %w", err, errBadBody))
	}
	return m, nil
}

func encodeTerm(term int64, name string) []byte {
	b := binary.AppendVarint(nil, term)
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

func decodeTerm(body []byte) (term int64, name string, err error) {
	r := bodyReader{b: body}
	term = r.varint()
	name = string(r.bytes())
	if len(r.b) != 0 {
		r.bad = true
	}
	return term, name, r.err("term record")
}

func encodeTruncate(keep, lastRemoved uint64) []byte {
	b := binary.AppendUvarint(nil, keep)
	return binary.AppendUvarint(b, lastRemoved)
}

func decodeTruncate(body []byte) (keep, lastRemoved uint64, err error) {
	r := bodyReader{b: body}
	keep = r.uvarint()
	lastRemoved = r.uvarint()
	if len(r.b) != 0 {
		r.bad = true
	}
	return keep, lastRemoved, r.err("truncate record")
}

// encodeDelete encodes a delete record: the name the deleted channel's id
// was defined with.
func encodeDelete(name string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(name)))
	return append(b, name...)
}

func decodeDelete(body []byte) (name string, err error) {
	r := bodyReader{b: body}
	name = string(r.bytes())
	if len(r.b) != 0 || name == "" {
		r.bad = true
	}
	return name, r.err("delete record")
}

func encodeSeal(next uint64) []byte { return binary.LittleEndian.AppendUint64(nil, next) }

func decodeSeal(body []byte) (next uint64, err error) {
	if len(body) != sealBodySize {
		return 0, errors.Wrapf(errBadBody, "seal record of %d bytes", len(body))
	}
	return binary.LittleEndian.Uint64(body), nil
}

const segmentMagic = "swlocal1"

// Flags of a segment start frame.
const (
	startRecycled = 1 << iota
	startHasSize
)

// chanSnapshot is one channel's durable state in a segment start frame.
type chanSnapshot struct {
	id          uint32
	name        string
	term        int64
	keep        uint64 // first kept seq
	lastRemoved uint64 // seq of the last removed message, 0 if none
	lastSeq     uint64 // seq of the channel's last message, 0 if none
}

// segmentStart is the body of a segment start frame.
type segmentStart struct {
	// prevEnd is where the frames of the previous segment end (its end
	// marker), 0 for the first segment: recovery checks that a segment that
	// is not the last one ends exactly there.
	prevEnd uint64
	// recycled says the file held an older segment before: past the end of
	// the log it holds that segment's frames, not zeros.
	recycled bool
	// segmentBytes is the size the segment may fill, the configured
	// SegmentBytes when it was started; 0 in segments written before the
	// size was recorded.
	segmentBytes int64
	nextChanID   uint32
	chans        []chanSnapshot
}

func encodeSegmentStart(st segmentStart) []byte {
	b := append([]byte(nil), segmentMagic...)
	b = binary.AppendUvarint(b, st.prevEnd)
	flags := uint64(0)
	if st.recycled {
		flags |= startRecycled
	}
	if st.segmentBytes != 0 {
		flags |= startHasSize
	}
	b = binary.AppendUvarint(b, flags)
	if st.segmentBytes != 0 {
		b = binary.AppendUvarint(b, uint64(st.segmentBytes))
	}
	b = binary.AppendUvarint(b, uint64(st.nextChanID))
	b = binary.AppendUvarint(b, uint64(len(st.chans)))
	for _, c := range st.chans {
		b = binary.AppendUvarint(b, uint64(c.id))
		b = binary.AppendUvarint(b, uint64(len(c.name)))
		b = append(b, c.name...)
		b = binary.AppendVarint(b, c.term)
		b = binary.AppendUvarint(b, c.keep)
		b = binary.AppendUvarint(b, c.lastRemoved)
		b = binary.AppendUvarint(b, c.lastSeq)
	}
	return b
}

func decodeSegmentStart(body []byte) (segmentStart, error) {
	if len(body) < len(segmentMagic) || string(body[:len(segmentMagic)]) != segmentMagic {
		return segmentStart{}, errors.Wrap(errBadBody, "segment start: bad magic")
	}
	r := bodyReader{b: body[len(segmentMagic):]}
	prevEnd := r.uvarint()
	flags := r.uvarint()
	var size uint64
	if flags&startHasSize != 0 {
		size = r.uvarint()
		if !r.bad && (size < minSegmentBytes || size > maxSegmentBytes) {
			return segmentStart{}, errors.Wrapf(errBadBody, "segment start: segment size %d outside [%d, %d]", size, minSegmentBytes, maxSegmentBytes)
		}
	}
	next := r.uvarint()
	n := r.uvarint()
	if flags > startRecycled|startHasSize || next > 1<<32-1 || n > uint64(len(r.b)) {
		return segmentStart{}, errors.Wrap(errBadBody, "segment start: bad flags or counts")
	}
	st := segmentStart{
		prevEnd: prevEnd, recycled: flags&startRecycled != 0, segmentBytes: int64(size),
		nextChanID: uint32(next), chans: make([]chanSnapshot, 0, n),
	}
	for i := uint64(0); i < n && !r.bad; i++ {
		var c chanSnapshot
		id := r.uvarint()
		c.name = string(r.bytes())
		c.term = r.varint()
		c.keep = r.uvarint()
		c.lastRemoved = r.uvarint()
		c.lastSeq = r.uvarint()
		if id == 0 || id >= next {
			r.bad = true
		}
		c.id = uint32(id)
		st.chans = append(st.chans, c)
	}
	if len(r.b) != 0 {
		r.bad = true
	}
	if err := r.err("segment start"); err != nil {
		return segmentStart{}, err
	}
	return st, nil
}
