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
// its header, each record's head and payload (the caller's bytes), its
// trailer. A flush PUTs them without copying them into one buffer of its
// own (a flush is up to FlushBytes; the copy and the zeroed allocation it
// needs were a tenth of the writer's CPU).
type objectBody struct {
	pieces [][]byte
	size   int
}

// newDataBody is the body of a data object: header, then the records laid
// out in pieces, in order, then the CRC-32C of all of it.
func newDataBody(h objectHeader, pieces [][]byte) objectBody {
	hdr := appendHeader(make([]byte, 0, headerSize), h)
	all := make([][]byte, 0, len(pieces)+2)
	all = append(all, hdr)
	crc := crc32.Update(0, castagnoli, hdr)
	size := len(hdr)
	for _, p := range pieces {
		crc = crc32.Update(crc, castagnoli, p)
		all = append(all, p)
		size += len(p)
	}
	all = append(all, binary.BigEndian.AppendUint32(make([]byte, 0, crcSize), crc))
	return objectBody{pieces: all, size: size + crcSize}
}

// bytes is the body in one buffer.
func (b objectBody) bytes() []byte {
	out := make([]byte, 0, b.size)
	for _, p := range b.pieces {
		out = append(out, p...)
	}
	return out
}

// reader reads the body from its start; each PUT takes its own, and ends
// it once the PUT returned. bufs holds WriteTo's buffers of bodyChunk
// bytes.
func (b objectBody) reader(bufs *sync.Pool) *bodyReader {
	return &bodyReader{pieces: b.pieces, size: int64(b.size), bufs: bufs}
}

// errBodyEnded is what a read of a body gets once its PUT ended.
var errBodyEnded = errors.New("s3: read of a flush's body after its PUT ended")

// bodyReader is an io.ReadSeeker over an objectBody (the SDK hashes the
// body, then seeks back to send it, and again to retry it).
//
// Its pieces are the appenders' payloads, which they may reuse once
// answered. An HTTP transport may still read a request's body after the
// round trip returned (net/http's RoundTripper says so: a request whose
// answer came before its body was sent); so the writer ends the reader
// once the PUT returned, and every read after that fails with errBodyEnded.
// A read holds mu while it copies from the pieces, so that end waits for
// one under way.
type bodyReader struct {
	bufs *sync.Pool

	mu     sync.Mutex
	ended  bool
	pieces [][]byte
	size   int64
	off    int64 // the position
	i, in  int   // the piece the position is in, and where in it
}

// end makes every later read fail; it returns once no read is under way.
func (r *bodyReader) end() {
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return 0, errBodyEnded
	}
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

// WriteTo writes the rest of the body in chunks of up to bodyChunk bytes,
// copied from the pieces: a flush's records are small pieces, and a write
// each (what io.Copy through a 4 KiB buffer comes to) made a system call
// each; and w writes the chunk after the copy, with mu free, so that end
// never waits on the network.
func (r *bodyReader) WriteTo(w io.Writer) (int64, error) {
	if h, ok := w.(hash.Hash); ok {
		return r.hashTo(h) // the SDK's payload hash: no system call to save
	}
	bp, _ := r.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, bodyChunk)
		bp = &b
	}
	defer r.bufs.Put(bp)
	buf := *bp
	var written int64
	for {
		n, err := r.Read(buf)
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, err
		}
		m, err := w.Write(buf[:n])
		written += int64(m)
		if err == nil && m < n {
			err = io.ErrShortWrite
		}
		if err != nil {
			// Where the reader is now is past what was written: put it
			// right for a caller that retries from here.
			r.mu.Lock()
			r.seek(r.off - int64(n-m))
			r.mu.Unlock()
			return written, err
		}
	}
}

// hashTo writes the rest of the body into h piece by piece, without
// copying it (a hash's Write never fails).
func (r *bodyReader) hashTo(h hash.Hash) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return 0, errBodyEnded
	}
	written := r.size - r.off
	for r.i < len(r.pieces) {
		_, _ = h.Write(r.pieces[r.i][r.in:])
		r.i, r.in = r.i+1, 0
	}
	r.off = r.size
	return written, nil
}

// bodyChunk is the most WriteTo writes at once (its buffer, one per PUT
// under way: small beside the flush).
const bodyChunk = 256 << 10

func (r *bodyReader) Seek(offset int64, whence int) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return r.off, errBodyEnded
	}
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
	r.seek(abs)
	return abs, nil
}

// seek moves the position to abs (mu held).
func (r *bodyReader) seek(abs int64) {
	r.off, r.i, r.in = abs, 0, 0
	for left := abs; r.i < len(r.pieces); r.i++ {
		if left < int64(len(r.pieces[r.i])) {
			r.in = int(left)
			break
		}
		left -= int64(len(r.pieces[r.i]))
	}
}

// recordArena hands out the buffers appends encode their records' heads
// into, carved from larger chunks: a flush of 1 KiB messages is thousands
// of records, and one small allocation each was a tenth of the writer's
// CPU. A chunk is freed by the garbage collector once every record in it
// was acknowledged (a request holds its records until then).
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
