package s3

import (
	"encoding/binary"
	"hash"
	"hash/crc32"
	"io"
	"sync"

	"github.com/cockroachdb/errors"
)

// objectBody is an object's bytes as the pieces the writer has them in:
// its header, each request's records, its trailer. A flush PUTs them
// without copying them into one buffer (a flush is up to FlushBytes; the
// copy and the zeroed allocation it needs were a tenth of the writer's CPU).
type objectBody struct {
	pieces [][]byte
	size   int
}

// newDataBody is the body of a data object: header, then the records of
// recs in order, then the CRC-32C of all of it.
func newDataBody(h objectHeader, recs [][]byte) objectBody {
	hdr := appendHeader(make([]byte, 0, headerSize), h)
	pieces := make([][]byte, 0, len(recs)+2)
	pieces = append(pieces, hdr)
	crc := crc32.Update(0, castagnoli, hdr)
	size := len(hdr)
	for _, r := range recs {
		crc = crc32.Update(crc, castagnoli, r)
		pieces = append(pieces, r)
		size += len(r)
	}
	pieces = append(pieces, binary.BigEndian.AppendUint32(make([]byte, 0, crcSize), crc))
	return objectBody{pieces: pieces, size: size + crcSize}
}

// bytes is the body in one buffer.
func (b objectBody) bytes() []byte {
	out := make([]byte, 0, b.size)
	for _, p := range b.pieces {
		out = append(out, p...)
	}
	return out
}

// reader reads the body from its start; each PUT takes its own.
func (b objectBody) reader() *bodyReader { return &bodyReader{pieces: b.pieces, size: int64(b.size)} }

// bodyReader is an io.ReadSeeker over an objectBody (the SDK hashes the
// body, then seeks back to send it, and again to retry it).
type bodyReader struct {
	pieces [][]byte
	size   int64
	off    int64 // the position
	i, in  int   // the piece the position is in, and where in it
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.i < len(r.pieces) {
		c := copy(p[n:], r.pieces[r.i][r.in:])
		n += c
		r.in += c
		if r.in == len(r.pieces[r.i]) {
			r.i, r.in = r.i+1, 0
		}
	}
	r.off += int64(n)
	return n, nil
}

// WriteTo writes the rest of the body in chunks of up to bodyChunk bytes:
// a flush's records are small pieces, and a write each (what io.Copy through
// a 4 KiB buffer comes to) made a system call each.
func (r *bodyReader) WriteTo(w io.Writer) (int64, error) {
	if h, ok := w.(hash.Hash); ok {
		return r.hashTo(h) // the SDK's payload hash: no system call to save
	}
	buf := make([]byte, min(bodyChunk, max(r.size-r.off, 0)))
	var written int64
	for r.off < r.size {
		n, _ := r.Read(buf)
		m, err := w.Write(buf[:n])
		written += int64(m)
		if err == nil && m < n {
			err = io.ErrShortWrite
		}
		if err != nil {
			// Where the reader is now is past what was written: put it
			// right for a caller that retries from here.
			_, _ = r.Seek(r.off-int64(n-m), io.SeekStart)
			return written, err
		}
	}
	return written, nil
}

// hashTo writes the rest of the body into h piece by piece, without
// copying it (a hash's Write never fails).
func (r *bodyReader) hashTo(h hash.Hash) (int64, error) {
	written := r.size - r.off
	for r.i < len(r.pieces) {
		_, _ = h.Write(r.pieces[r.i][r.in:])
		r.i, r.in = r.i+1, 0
	}
	r.off = r.size
	return written, nil
}

// bodyChunk is the most WriteTo writes at once (its buffer, one per PUT
// of a flush: small beside the flush).
const bodyChunk = 256 << 10

func (r *bodyReader) Seek(offset int64, whence int) (int64, error) {
	abs := offset
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		abs += r.off
	case io.SeekEnd:
		abs += r.size
	default:
		return r.off, errors.Newf("s3: seek: bad whence %d", whence)
	}
	if abs < 0 {
		return r.off, errors.Newf("s3: seek to %d, before the start", abs)
	}
	r.off, r.i, r.in = abs, 0, 0
	for left := abs; r.i < len(r.pieces); r.i++ {
		if left < int64(len(r.pieces[r.i])) {
			r.in = int(left)
			break
		}
		left -= int64(len(r.pieces[r.i]))
	}
	return abs, nil
}

// recordArena hands out the buffers appends encode their records into,
// carved from larger chunks: a flush of 1 KiB messages is thousands of
// records, and one small allocation each was a tenth of the writer's CPU.
// A chunk is freed by the garbage collector once every record in it was
// acknowledged (a request holds its records until then).
type recordArena struct {
	mu   sync.Mutex
	free []byte // the rest of the current chunk
}

const (
	// arenaChunk is a chunk's size: an Opener keeps at most one chunk
	// that no append holds.
	arenaChunk = 64 << 10
	// arenaMax is the largest buffer carved from a chunk; a larger one is
	// allocated on its own.
	arenaMax = arenaChunk / 8
)

// alloc returns an empty buffer of capacity n: appending beyond n moves it
// out of the chunk, never over a neighbour.
func (a *recordArena) alloc(n int) []byte {
	if n > arenaMax {
		return make([]byte, 0, n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.free) < n {
		a.free = make([]byte, arenaChunk)
	}
	b := a.free[:0:n]
	a.free = a.free[n:]
	return b
}
