package local

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// The frame layout is documented in format.go (Frames); keep the two in
// step. This file frames and unframes; body.go encodes what each frame type
// carries.
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
