package pulsartest

import (
	"bufio"
	"encoding/binary"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/errors"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/streamwal/streamwal/internal/errmark"
)

// Frame layout constants; see doc.go.
const (
	magicCRC32C        = 0x0e01
	framePadding       = 10 * 1024 // frame allowance on top of max_message_size
	defaultMaxMessage  = 5 * 1024 * 1024
	entryHeaderMinSize = 2 + 4 + 4 // magic, checksum, metadata size
)

// frame is one received frame: the command bytes and, for SEND, the bytes
// after the command (magic, checksum, metadata size, metadata, payload).
type frame struct {
	cmd     []byte
	payload []byte
}

// readFrame reads one frame of at most maxFrame bytes (after the size field).
func readFrame(r *bufio.Reader, maxFrame uint32) (frame, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return frame{}, err
	}
	total := binary.BigEndian.Uint32(hdr[:4])
	if total < 4 || total > maxFrame {
		return frame{}, errors.Newf("bad frame size %d (max %d)", total, maxFrame)
	}
	buf := make([]byte, total)
	if _, err := io.ReadFull(r, buf); err != nil {
		return frame{}, errors.Wrap(err, "read frame")
	}
	cmdSize := binary.BigEndian.Uint32(buf[:4])
	if uint64(cmdSize)+4 > uint64(total) {
		return frame{}, errors.Newf("bad command size %d in frame of %d", cmdSize, total)
	}
	f := frame{cmd: buf[4 : 4+cmdSize]}
	if rest := buf[4+cmdSize:]; len(rest) > 0 {
		f.payload = rest
	}
	return f, nil
}

// appendFrameHead encodes the start of a frame: sizes and command. The
// optional entry bytes (magic, checksum, metadata size, metadata, payload,
// stored as received) follow it on the wire.
func appendFrameHead(dst, cmd []byte, entryLen int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(cmd)+entryLen))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(cmd)))
	return append(dst, cmd...)
}

// appendFrame encodes a whole frame.
func appendFrame(dst, cmd, entry []byte) []byte {
	return append(appendFrameHead(dst, cmd, len(entry)), entry...)
}

// entryInfo is what the broker reads from a SEND payload; the bytes are
// otherwise stored and replayed untouched.
type entryInfo struct {
	numMessages int32 // messages in the entry: permits it costs
	batched     bool  // metadata has num_messages_in_batch
}

// errChecksum marks a payload whose CRC32-C does not match.
var errChecksum = errors.New("checksum mismatch")

// parseEntry validates a SEND payload: magic, CRC32-C over everything after
// the checksum, and a metadata block that fits. It reads
// num_messages_in_batch from the metadata without decoding the rest.
func parseEntry(p []byte, table *crc32.Table) (entryInfo, error) {
	if len(p) < entryHeaderMinSize {
		return entryInfo{}, errors.Newf("payload of %d bytes is too short", len(p))
	}
	if m := binary.BigEndian.Uint16(p[:2]); m != magicCRC32C {
		return entryInfo{}, errors.Newf("bad magic 0x%04x", m)
	}
	want := binary.BigEndian.Uint32(p[2:6])
	if got := crc32.Checksum(p[6:], table); got != want {
		return entryInfo{}, errmark.Mark(errors.Newf("checksum 0x%08x, computed 0x%08x", want, got), errChecksum)
	}
	metaSize := binary.BigEndian.Uint32(p[6:10])
	if uint64(metaSize) > uint64(len(p)-10) {
		return entryInfo{}, errors.Newf("metadata size %d exceeds payload", metaSize)
	}
	info := entryInfo{numMessages: 1}
	meta := p[10 : 10+metaSize]
	for len(meta) > 0 {
		num, typ, n := protowire.ConsumeTag(meta)
		if n < 0 {
			return entryInfo{}, errors.Wrap(protowire.ParseError(n), "metadata")
		}
		meta = meta[n:]
		if num == metadataNumMessagesInBatch && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(meta)
			if n < 0 {
				return entryInfo{}, errors.Wrap(protowire.ParseError(n), "metadata")
			}
			info.batched = true
			info.numMessages = int32(v)
			meta = meta[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, meta)
		if n < 0 {
			return entryInfo{}, errors.Wrap(protowire.ParseError(n), "metadata")
		}
		meta = meta[n:]
	}
	if info.numMessages < 1 {
		info.numMessages = 1
	}
	return info, nil
}
