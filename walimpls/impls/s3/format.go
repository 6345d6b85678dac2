package s3

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Object kinds (header byte 4, and metadata streamwal-kind).
const (
	kindData  = 1
	kindFence = 2
)

const (
	magic      = "SWL1"
	headerSize = 4 + 1 + 1 + 2 + 8 + 8 + 8 + 4 + 16
	crcSize    = 4
	// recordOverhead is what a record adds to Message.Size besides the
	// property count: nprops and plen.
	recordFixed = 4 + 4
	// propOverhead is what one property adds besides its key and value.
	propOverhead = 2 + 4
	maxKeyLen    = 1<<16 - 1
)

// User metadata keys (S3 lower-cases them).
const (
	metaKind    = "streamwal-kind"
	metaTerm    = "streamwal-term"
	metaCount   = "streamwal-count"
	metaNonce   = "streamwal-nonce"
	metaDeleted = "streamwal-deleted"
	// metaSealFrom is on a fence: the first slot of the round that put it.
	metaSealFrom = "streamwal-seal-from"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// keys derives every key of the backend from the configured prefix.
type keys struct{ prefix string }

func (k keys) channel(name string) string { return k.prefix + name + "/" }
func (k keys) manifest(name string) string {
	return k.channel(name) + "manifest"
}
func (k keys) epochDir(name string, epoch uint64) string {
	return fmt.Sprintf("%se%020d/", k.channel(name), epoch)
}
func (k keys) slot(name string, epoch, slot uint64) string {
	return fmt.Sprintf("%s%020d", k.epochDir(name, epoch), slot)
}
func (k keys) hint(name string, epoch uint64) string { return k.epochDir(name, epoch) + "hint" }
func (k keys) probe(random string) string            { return k.prefix + "_probe/" + random }

// parseSlotKey splits a key under a channel into its epoch and slot; ok is
// false for the manifest, hints and anything else.
func parseSlotKey(rest string) (epoch uint64, slot uint64, isHint bool, ok bool) {
	// rest: e<20 digits>/<20 digits> or e<20 digits>/hint
	if len(rest) < 22 || rest[0] != 'e' || rest[21] != '/' {
		return 0, 0, false, false
	}
	e, err := strconv.ParseUint(rest[1:21], 10, 64)
	if err != nil {
		return 0, 0, false, false
	}
	tail := rest[22:]
	if tail == "hint" {
		return e, 0, true, true
	}
	if len(tail) != 20 {
		return 0, 0, false, false
	}
	s, err := strconv.ParseUint(tail, 10, 64)
	if err != nil {
		return 0, 0, false, false
	}
	return e, s, false, true
}

// nonce identifies one flush across its retries.
type nonce [16]byte

func (n nonce) String() string { return hex.EncodeToString(n[:]) }

// recordHeadSize is the bytes of m's record before its payload.
func recordHeadSize(m message.Message) int {
	n := recordFixed
	if props := m.Properties(); props.Len() > 0 { // no walk for none: the common record
		for k, v := range props.Pairs() {
			n += propOverhead + len(k) + len(v)
		}
	}
	return n
}

// appendRecordHead encodes m's record up to its payload, which follows it
// in the object. A property key longer than a record can hold is a
// TooLargeError.
func appendRecordHead(b []byte, m message.Message) ([]byte, error) {
	props := m.Properties()
	b = binary.BigEndian.AppendUint32(b, uint32(props.Len()))
	if props.Len() > 0 {
		for k, v := range props.Pairs() {
			if len(k) > maxKeyLen {
				return nil, &walimpls.TooLargeError{Size: len(k), Limit: maxKeyLen, What: "the largest property key an object holds"}
			}
			b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
			b = append(b, k...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return binary.BigEndian.AppendUint32(b, uint32(len(m.Payload()))), nil
}

// objectHeader is an object's header.
type objectHeader struct {
	kind  uint8
	epoch uint64
	term  int64
	slot  uint64
	count uint32
	nonce nonce
}

// appendHeader writes h at the start of an object.
func appendHeader(b []byte, h objectHeader) []byte {
	b = append(b, magic...)
	b = append(b, h.kind, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, h.epoch)
	b = binary.BigEndian.AppendUint64(b, uint64(h.term))
	b = binary.BigEndian.AppendUint64(b, h.slot)
	b = binary.BigEndian.AppendUint32(b, h.count)
	return append(b, h.nonce[:]...)
}

// sealObject appends the trailer: the CRC-32C of everything before it.
func sealObject(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// fenceObject is the body of a fence; n is its nonce, like a flush's.
func fenceObject(epoch, slot uint64, term int64, n nonce) []byte {
	b := appendHeader(make([]byte, 0, headerSize+crcSize), objectHeader{kind: kindFence, epoch: epoch, term: term, slot: slot, nonce: n})
	return sealObject(b)
}

// errCorrupt marks an object that failed its checks.
var errCorrupt = errors.New("corrupt object")

// object is a decoded object.
type object struct {
	objectHeader
	msgs []message.Message
	size int // bytes of the object
}

// decodeObject checks body (magic, version, CRC, epoch and slot against
// the key's) and decodes its records. The messages' payloads alias body.
func decodeObject(key string, body []byte, epoch, slot uint64) (*object, error) {
	bad := func(format string, args ...any) error {
		return errors.Wrapf(errCorrupt, "s3: object %s: %s", key, fmt.Sprintf(format, args...))
	}
	if len(body) < headerSize+crcSize {
		return nil, bad("%d bytes, shorter than a header and a trailer", len(body))
	}
	if string(body[:3]) != magic[:3] {
		return nil, bad("bad magic %q", body[:4])
	}
	if body[3] != magic[3] {
		return nil, bad("format version %q, this backend reads %q", body[3], magic[3])
	}
	end := len(body) - crcSize
	if got, want := crc32.Checksum(body[:end], castagnoli), binary.BigEndian.Uint32(body[end:]); got != want {
		return nil, bad("CRC-32C %08x, the trailer says %08x", got, want)
	}
	h := objectHeader{kind: body[4]}
	h.epoch = binary.BigEndian.Uint64(body[8:])
	h.term = int64(binary.BigEndian.Uint64(body[16:]))
	h.slot = binary.BigEndian.Uint64(body[24:])
	h.count = binary.BigEndian.Uint32(body[32:])
	copy(h.nonce[:], body[36:52])
	if h.epoch != epoch || h.slot != slot {
		return nil, bad("holds epoch %d slot %d, the key says epoch %d slot %d", h.epoch, h.slot, epoch, slot)
	}
	o := &object{objectHeader: h, size: len(body)}
	switch h.kind {
	case kindFence:
		if h.count != 0 || end != headerSize {
			return nil, bad("a fence with records")
		}
		return o, nil
	case kindData:
	default:
		return nil, bad("unknown kind %d", h.kind)
	}
	b := body[headerSize:end]
	o.msgs = make([]message.Message, 0, h.count)
	for i := uint32(0); i < h.count; i++ {
		m, rest, err := decodeRecord(b)
		if err != nil {
			return nil, bad("record %d: %v", i, err)
		}
		o.msgs = append(o.msgs, m)
		b = rest
	}
	if len(b) != 0 {
		return nil, bad("%d bytes after its %d records", len(b), h.count)
	}
	if h.count == 0 {
		return nil, bad("a data object without records")
	}
	return o, nil
}

// errShortRecord is a record cut short; made once, not per record, since
// decodeRecord runs for every message read.
var errShortRecord = errors.New("truncated record")

func decodeRecord(b []byte) (message.Message, []byte, error) {
	short := errShortRecord
	if len(b) < 4 {
		return message.Message{}, nil, short
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	var props map[string]string
	if n > 0 {
		if uint64(n)*propOverhead > uint64(len(b)) {
			return message.Message{}, nil, short
		}
		props = make(map[string]string, n)
	}
	for range n {
		if len(b) < 2 {
			return message.Message{}, nil, short
		}
		kl := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		if len(b) < kl+4 {
			return message.Message{}, nil, short
		}
		k := string(b[:kl])
		b = b[kl:]
		vl := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(vl) {
			return message.Message{}, nil, short
		}
		props[k] = string(b[:vl])
		b = b[vl:]
	}
	if len(b) < 4 {
		return message.Message{}, nil, short
	}
	pl := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(len(b)) < uint64(pl) {
		return message.Message{}, nil, short
	}
	payload := b[:pl:pl]
	if pl == 0 {
		payload = nil
	}
	return message.Restore(payload, props), b[pl:], nil
}

// epochEntry is an epoch the manifest keeps.
type epochEntry struct {
	Epoch uint64 `json:"epoch"`
	Term  int64  `json:"term"`
	// Window is the writer's MaxInflight: a data object at slot x means
	// every slot up to x-Window holds data (see the package doc).
	Window int    `json:"window"`
	Sealed bool   `json:"sealed,omitempty"`
	End    *int64 `json:"end,omitempty"`
	// Claim is the nonce of the open that recorded the epoch: an open
	// whose manifest write landed and whose answer was lost finds its own
	// epoch when it reads the manifest again (manifests written before
	// the field have none).
	Claim string `json:"claim,omitempty"`
}

// end returns the last slot of a sealed epoch (-1: none).
func (e epochEntry) end() int64 {
	if e.End == nil {
		return -1
	}
	return *e.End
}

func (e epochEntry) window() uint64 { return uint64(max(e.Window, 1)) }

// manifestPos is a position in the manifest's JSON.
type manifestPos struct {
	Epoch uint64 `json:"epoch"`
	Slot  uint64 `json:"slot"`
	Index uint32 `json:"index"`
}

// manifest is a channel's manifest (see the package doc).
type manifest struct {
	V       int    `json:"v"`
	Channel string `json:"channel"`
	// Rev counts the manifest's writes: of two copies, the higher is the
	// newer.
	Rev       uint64       `json:"rev"`
	Term      int64        `json:"term"`
	NextEpoch uint64       `json:"nextEpoch"`
	Epochs    []epochEntry `json:"epochs"`
	Truncated *manifestPos `json:"truncated,omitempty"`
	// Removed is the last message removed, the one just before
	// Truncated: reading from after it is valid (it starts at Truncated).
	Removed *manifestPos `json:"removed,omitempty"`
	Deleted bool         `json:"deleted,omitempty"`
}

const manifestVersion = 1

func (m *manifest) encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return b
}

func decodeManifest(key string, b []byte) (*manifest, error) {
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.Wrapf(errCorrupt, "s3: manifest %s: %v", key, err)
	}
	if m.V != manifestVersion {
		return nil, errors.Wrapf(errCorrupt, "s3: manifest %s: version %d, this backend reads %d", key, m.V, manifestVersion)
	}
	for i, e := range m.Epochs {
		if i > 0 && e.Epoch <= m.Epochs[i-1].Epoch {
			return nil, errors.Wrapf(errCorrupt, "s3: manifest %s: epochs out of order", key)
		}
		if i < len(m.Epochs)-1 && !e.Sealed {
			return nil, errors.Wrapf(errCorrupt, "s3: manifest %s: epoch %d before the last is not sealed", key, e.Epoch)
		}
	}
	return &m, nil
}

// clone returns a deep copy of m, to change.
func (m *manifest) clone() *manifest {
	c := *m
	c.Epochs = append([]epochEntry(nil), m.Epochs...)
	if m.Truncated != nil {
		t := *m.Truncated
		c.Truncated = &t
	}
	if m.Removed != nil {
		r := *m.Removed
		c.Removed = &r
	}
	return &c
}

// open returns the open (last, unsealed) epoch.
func (m *manifest) open() (epochEntry, bool) {
	if len(m.Epochs) == 0 {
		return epochEntry{}, false
	}
	e := m.Epochs[len(m.Epochs)-1]
	return e, !e.Sealed
}

// truncated returns the first position kept, and false when nothing was
// ever truncated.
func (m *manifest) truncated() (pos, bool) {
	if m.Truncated == nil {
		return pos{}, false
	}
	return pos{epoch: m.Truncated.Epoch, slot: m.Truncated.Slot, index: m.Truncated.Index}, true
}

// removed returns the last message removed, and false when none is known.
func (m *manifest) removed() (pos, bool) {
	if m.Removed == nil {
		return pos{}, false
	}
	return pos{epoch: m.Removed.Epoch, slot: m.Removed.Slot, index: m.Removed.Index}, true
}

func toManifestPos(p pos) *manifestPos {
	return &manifestPos{Epoch: p.epoch, Slot: p.slot, Index: p.index}
}

// firstSlot is the first slot of epoch e that may hold a kept message.
func (m *manifest) firstSlot(e uint64) uint64 {
	if t, ok := m.truncated(); ok && t.epoch == e {
		return t.slot
	}
	return 0
}

// gone reports whether p lies before the first position kept.
func (m *manifest) gone(p pos) bool {
	if m.Deleted {
		return true
	}
	t, ok := m.truncated()
	return ok && p.less(t)
}

// entry returns the epoch entry of e.
func (m *manifest) entry(e uint64) (epochEntry, bool) {
	for _, x := range m.Epochs {
		if x.Epoch == e {
			return x, true
		}
	}
	return epochEntry{}, false
}

// describe is the manifest in a log line.
func (m *manifest) describe() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "term %d, next epoch %d, epochs", m.Term, m.NextEpoch)
	for _, e := range m.Epochs {
		if e.Sealed {
			fmt.Fprintf(&sb, " %d(sealed, end %d)", e.Epoch, e.end())
		} else {
			fmt.Fprintf(&sb, " %d(open)", e.Epoch)
		}
	}
	return sb.String()
}
