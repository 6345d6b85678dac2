package boltstore

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/internal/storeerr"
)

// The layout of the file; see doc.go.
var (
	bucketMeta = []byte("meta")
	bucketKV   = []byte("kv")
	keyFormat  = []byte("format")
	keyRev     = []byte("rev")
)

const (
	// formatVersion is the value of meta/format this package writes and
	// reads.
	formatVersion = 1
	// recordKind is the first byte of a record.
	recordKind = 0x01
	// recordHeader is the size of a record before its value: kind,
	// revision, CRC.
	recordHeader = 1 + 8 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordCRC is the checksum of a record: kind and revision (hdr, the first
// 9 bytes), key and value.
func recordCRC(hdr, key, value []byte) uint32 {
	c := crc32.Update(0, castagnoli, hdr)
	c = crc32.Update(c, castagnoli, key)
	return crc32.Update(c, castagnoli, value)
}

// encodeRecord returns the record of value written at rev under key.
func encodeRecord(key, value []byte, rev int64) []byte {
	b := make([]byte, recordHeader+len(value))
	b[0] = recordKind
	binary.BigEndian.PutUint64(b[1:9], uint64(rev))
	binary.BigEndian.PutUint32(b[9:13], recordCRC(b[:9], key, value))
	copy(b[recordHeader:], value)
	return b
}

// decodeRecord checks the record stored under key and returns its
// revision and value; value aliases b (bbolt memory: copy it before the
// transaction ends). storeRev is the store revision, above which no record
// may be.
func decodeRecord(key, b []byte, storeRev int64) (int64, []byte, error) {
	corrupt := func(format string, args ...any) error {
		return storeerr.Mark(errors.Newf("boltstore: record of key %q: "+format, append([]any{key}, args...)...), meta.ErrCorrupt)
	}
	if len(b) < recordHeader {
		return 0, nil, corrupt("%d bytes, shorter than its header", len(b))
	}
	if b[0] != recordKind {
		return 0, nil, corrupt("unknown kind 0x%02x", b[0])
	}
	value := b[recordHeader:]
	if got, want := binary.BigEndian.Uint32(b[9:13]), recordCRC(b[:9], key, value); got != want {
		return 0, nil, corrupt("checksum 0x%08x, computed 0x%08x", got, want)
	}
	rev := binary.BigEndian.Uint64(b[1:9])
	if rev == 0 || rev > uint64(storeRev) {
		return 0, nil, corrupt("revision %d outside 1..%d", rev, storeRev)
	}
	return int64(rev), value, nil
}

// encodeRev is the stored form of the store revision.
func encodeRev(rev int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(rev))
}

// decodeRev reads the store revision.
func decodeRev(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, storeerr.Mark(errors.Newf("boltstore: store revision of %d bytes", len(b)), meta.ErrCorrupt)
	}
	rev := binary.BigEndian.Uint64(b)
	if rev > 1<<62 {
		return 0, storeerr.Mark(errors.Newf("boltstore: store revision %d out of range", rev), meta.ErrCorrupt)
	}
	return int64(rev), nil
}
