package s3

import (
	"bytes"
	"crypto/sha256"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A body in pieces reads, and seeks, as the one buffer it stands for, and
// decodes as the object it is.
func TestObjectBodyReadsAsOneBuffer(t *testing.T) {
	recs := [][]byte{[]byte("abc"), {}, bytes.Repeat([]byte("x"), 1000), []byte("z")}
	b := newDataBody(objectHeader{kind: kindData, epoch: 3, term: 7, slot: 9, count: 0}, recs)
	whole := b.bytes()
	require.Len(t, whole, b.size)
	var want []byte
	want = appendHeader(want, objectHeader{kind: kindData, epoch: 3, term: 7, slot: 9, count: 0})
	for _, r := range recs {
		want = append(want, r...)
	}
	require.Equal(t, sealObject(want), whole)
	var bufs sync.Pool

	for _, chunk := range []int{1, 2, 7, 64, 4096} {
		r := b.reader(&bufs)
		var got []byte
		buf := make([]byte, chunk)
		for {
			n, err := r.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		require.Equal(t, whole, got, "read %d at a time", chunk)
	}
	r := b.reader(&bufs)
	for _, off := range []int64{0, 1, headerSize, headerSize + 3, int64(b.size) - 1, int64(b.size)} {
		at, err := r.Seek(off, io.SeekStart)
		require.NoError(t, err)
		require.Equal(t, off, at)
		rest, err := io.ReadAll(r)
		require.NoError(t, err)
		require.Equal(t, whole[off:], rest, "from %d", off)
	}
	end, err := r.Seek(-2, io.SeekEnd)
	require.NoError(t, err)
	require.Equal(t, int64(b.size-2), end)
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, whole[b.size-2:], rest)
	_, err = r.Seek(-1, io.SeekStart)
	require.Error(t, err)
}

// WriteTo writes what Read would read, from where the reader is, and
// leaves it at the end.
func TestObjectBodyWriteTo(t *testing.T) {
	recs := make([][]byte, 3000)
	for i := range recs {
		recs[i] = bytes.Repeat([]byte{byte(i)}, 100+i%7)
	}
	b := newDataBody(objectHeader{kind: kindData, epoch: 1, slot: 2}, recs)
	whole := b.bytes()
	var bufs sync.Pool
	for _, from := range []int64{0, 5, int64(b.size) / 2, int64(b.size)} {
		r := b.reader(&bufs)
		_, err := r.Seek(from, io.SeekStart)
		require.NoError(t, err)
		var out bytes.Buffer
		n, err := r.WriteTo(&out)
		require.NoError(t, err)
		require.Equal(t, int64(b.size)-from, n)
		require.True(t, bytes.Equal(whole[from:], out.Bytes()), "written from %d", from)
		rest, err := io.ReadAll(r)
		require.NoError(t, err)
		require.Empty(t, rest)
	}
}

// Into a hash, WriteTo gives what Read would, from where the reader is.
func TestObjectBodyHashes(t *testing.T) {
	b := newDataBody(objectHeader{kind: kindData, epoch: 1, slot: 2}, [][]byte{[]byte("abc"), bytes.Repeat([]byte("d"), 5000)})
	var bufs sync.Pool
	for _, from := range []int64{0, 7, int64(b.size)} {
		r := b.reader(&bufs)
		_, err := r.Seek(from, io.SeekStart)
		require.NoError(t, err)
		h := sha256.New()
		n, err := r.WriteTo(h)
		require.NoError(t, err)
		require.Equal(t, int64(b.size)-from, n)
		want := sha256.Sum256(b.bytes()[from:])
		require.Equal(t, want[:], h.Sum(nil), "from %d", from)
		at, err := r.Seek(0, io.SeekCurrent)
		require.NoError(t, err)
		require.Equal(t, int64(b.size), at)
	}
}

// blockedWriter's first Write waits for release.
type blockedWriter struct {
	entered, release chan struct{}
	once             sync.Once
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		<-w.release
	})
	return len(p), nil
}

// Once ended, a body reads nothing more of its pieces (the appenders'
// payloads), in any way; end does not wait for a write of a chunk already
// copied out (the network), and the WriteTo under way fails at its next
// chunk.
func TestObjectBodyEnds(t *testing.T) {
	b := newDataBody(objectHeader{kind: kindData, epoch: 1, slot: 2}, [][]byte{bytes.Repeat([]byte("e"), 3*bodyChunk)})
	var bufs sync.Pool
	r := b.reader(&bufs)
	w := &blockedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	res := make(chan error, 1)
	go func() {
		_, err := r.WriteTo(w)
		res <- err
	}()
	<-w.entered
	r.end() // returns while the first chunk's Write still waits
	close(w.release)
	require.ErrorIs(t, <-res, errBodyEnded)

	_, err := r.Read(make([]byte, 10))
	require.ErrorIs(t, err, errBodyEnded)
	_, err = r.Seek(0, io.SeekStart)
	require.ErrorIs(t, err, errBodyEnded)
	_, err = r.WriteTo(sha256.New())
	require.ErrorIs(t, err, errBodyEnded)
	_, err = r.WriteTo(io.Discard)
	require.ErrorIs(t, err, errBodyEnded)
}
