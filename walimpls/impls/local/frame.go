package local

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
)

// The frame layout is documented in format.go; keep the two in step.
const (
	headerSize = 32
	frameAlign = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type frameType uint8

const (
	typeSegmentStart frameType = 1
	// typeMessageV1 is a message whose kind, term and timetick are
	// properties like any other: written before typeMessage existed, read
	// still, no longer written.
	typeMessageV1 frameType = 2
	typeTerm      frameType = 3
	typeTruncate  frameType = 4
	typeSeal      frameType = 5
	typeDelete    frameType = 6
	// typeMessage is a message: its stamp, properties and payload.
	typeMessage frameType = 7
)

// isMessage reports whether a frame of type typ holds a message.
func isMessage[T frameType | byte](typ T) bool {
	return frameType(typ) == typeMessage || frameType(typ) == typeMessageV1
}

// Frame flags, header byte 29.
const (
	// flagMore marks a message frame that the next frame of its batch
	// follows: a batch is a run of message frames of one channel, every
	// one of them but the last with flagMore (format.go, Batches).
	flagMore uint8 = 1
)

// sealSize is the size of a seal frame; sealReserve is the room the framer
// keeps at the end of every segment for the seal and the end marker after
// it.
const (
	sealBodySize = 8
	sealSize     = (headerSize + sealBodySize + frameAlign - 1) &^ (frameAlign - 1)
	sealReserve  = sealSize + headerSize
)

// frameHeader is a decoded frame header (without the CRC, which
// decodeFrame checks).
type frameHeader struct {
	length uint32
	seq    uint64
	seg    uint32
	synced uint32
	chanID uint32
	typ    frameType
	flags  uint8
}

// frameSize is the bytes a frame with a body of n bytes takes, padding
// included.
func frameSize(n int) int { return (headerSize + n + frameAlign - 1) &^ (frameAlign - 1) }

// appendFrame appends the frame of h and body to buf. h.length is taken from
// body.
func appendFrame(buf []byte, h frameHeader, body []byte) []byte {
	start := len(buf)
	total := frameSize(len(body))
	buf = slices.Grow(buf, total)[:start+total]
	f := buf[start:]
	binary.LittleEndian.PutUint32(f[4:], uint32(len(body)))
	binary.LittleEndian.PutUint64(f[8:], h.seq)
	binary.LittleEndian.PutUint32(f[16:], h.seg)
	binary.LittleEndian.PutUint32(f[20:], h.synced)
	binary.LittleEndian.PutUint32(f[24:], h.chanID)
	f[28], f[29], f[30], f[31] = byte(h.typ), h.flags, 0, 0
	copy(f[headerSize:], body)
	clear(f[headerSize+len(body):])
	binary.LittleEndian.PutUint32(f[0:], crc32.Checksum(f[4:headerSize+len(body)], castagnoli))
	return buf
}

// frameStatus classifies what starts at an offset of a segment.
type frameStatus uint8

const (
	frameOK frameStatus = iota
	// frameZero: an all-zero header, i.e. pre-zeroed space never written
	// (or a file that ends exactly here).
	frameZero
	// frameShort: the header or body runs past the end of the bytes given.
	frameShort
	// frameBad: bad CRC, unknown type, unknown flags or non-zero reserved
	// bytes.
	frameBad
	// frameStale: a valid frame written to another segment.
	frameStale
)

func (s frameStatus) String() string {
	switch s {
	case frameOK:
		return "valid frame"
	case frameZero:
		return "zeroed space"
	case frameShort:
		return "partial frame"
	case frameBad:
		return "bad frame (checksum or header)"
	case frameStale:
		return "frame of another segment"
	}
	return "unknown"
}

// decodeFrame decodes the frame at the start of b, written to segment seg.
// It returns the header, the body (aliasing b), the frame's size with
// padding, and its status; only frameOK results carry a header and body.
func decodeFrame(b []byte, seg uint32) (frameHeader, []byte, int, frameStatus) {
	if len(b) < headerSize {
		if allZero(b) {
			return frameHeader{}, nil, 0, frameZero
		}
		return frameHeader{}, nil, 0, frameShort
	}
	if allZero(b[:headerSize]) {
		return frameHeader{}, nil, 0, frameZero
	}
	h := frameHeader{
		length: binary.LittleEndian.Uint32(b[4:]),
		seq:    binary.LittleEndian.Uint64(b[8:]),
		seg:    binary.LittleEndian.Uint32(b[16:]),
		synced: binary.LittleEndian.Uint32(b[20:]),
		chanID: binary.LittleEndian.Uint32(b[24:]),
		typ:    frameType(b[28]),
		flags:  b[29],
	}
	if !validTypeAndFlags(b[28], b[29]) || b[30]|b[31] != 0 {
		return frameHeader{}, nil, 0, frameBad
	}
	if uint64(h.length) > uint64(len(b)-headerSize) {
		return frameHeader{}, nil, 0, frameShort
	}
	end := headerSize + int(h.length)
	if crc32.Checksum(b[4:end], castagnoli) != binary.LittleEndian.Uint32(b[0:]) {
		return frameHeader{}, nil, 0, frameBad
	}
	if h.seg != seg {
		return frameHeader{}, nil, 0, frameStale
	}
	size := min(frameSize(int(h.length)), len(b))
	return h, b[headerSize:end], size, frameOK
}

// validTypeAndFlags reports whether typ is a frame type and flags are flags
// that type may carry (only message frames belong to batches).
func validTypeAndFlags(typ, flags byte) bool {
	if typ < byte(typeSegmentStart) || typ > byte(typeMessage) {
		return false
	}
	return flags == 0 || flags == flagMore && isMessage(typ)
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

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
