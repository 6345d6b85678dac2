package local

import (
	"fmt"
	"sort"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/internal/scanout"
)

// scanner delivers one channel's messages from a cursor on. Its goroutine
// reads up to budget bytes of frames at a time (the read-ahead), hands them
// over one by one, and waits on the channel's notify channel at the tail.
// The disk works meanwhile: the kernel reads ahead of it (see read).
type scanner struct {
	*lifecycle.Run
	w      *wal
	name   string
	cursor uint64 // the next seq to deliver; owned by run
	budget int
	out    *scanout.Out

	// Owned by run.
	batch   []entry
	decoded []decoded
	advised uint64 // the last segment advised as read sequentially
}

var (
	_ walimpls.Scanner      = (*scanner)(nil)
	_ walimpls.BatchScanner = (*scanner)(nil)
)

// sliceLen bounds the messages of one slice a batch scanner delivers: a
// read-ahead of small messages holds thousands, and the consumer's budget
// counts what it holds.
const sliceLen = 256

func newScanner(w *wal, name string, cursor uint64, budget int, batches bool) *scanner {
	return &scanner{
		Run: lifecycle.NewRun(), w: w, name: name, cursor: cursor, budget: budget,
		out: scanout.New(batches, 0),
	}
}

// Chan implements walimpls.Scanner (Read).
func (sc *scanner) Chan() <-chan message.Immutable { return sc.out.Chan() }

// Batches implements walimpls.BatchScanner (ReadBatches).
func (sc *scanner) Batches() <-chan []message.Immutable { return sc.out.Batches() }

// decoded is a message read ahead, with its seq.
type decoded struct {
	seq uint64
	m   message.Immutable
}

// run owns cursor and out until it returns. The WAL's Close stops it with
// ErrClosed as the reason.
func (sc *scanner) run() {
	err := sc.deliver()
	sc.w.scanners.Remove(sc)
	sc.out.Close()
	sc.End(err)
}

func (sc *scanner) deliver() error {
	ch := sc.w.ch
	for {
		batch, notify := sc.next()
		if batch == nil && notify == nil {
			return sc.gone()
		}
		if len(batch) == 0 {
			select {
			case <-notify:
				continue
			case <-sc.Stopping():
				return nil
			}
		}
		msgs, err := sc.read(batch)
		if err != nil {
			if ch.lastRemoved.Load() >= batch[0].seq || ch.deleted.Load() {
				// The records were truncated or their channel deleted (and
				// their segment maybe freed) under us.
				return sc.gone()
			}
			return errors.Wrapf(err, "local: scanner %q of %s", sc.name, sc.w.info)
		}
		step := 1
		if sc.out.Batched() {
			step = sliceLen
		}
		for i := 0; i < len(msgs); i += step {
			part := msgs[i:min(i+step, len(msgs))]
			// A deletion lets the messages read ahead go out (next ends
			// the scanner after them); a truncation does not. It removes
			// a prefix: if it reached any message of part, it reached the
			// first.
			if ch.lastRemoved.Load() >= part[0].seq {
				return sc.gone()
			}
			out := sc.out.Slice(len(part))
			for _, d := range part {
				out = append(out, d.m)
			}
			n := sc.out.Deliver(sc.Stopping(), out)
			if n > 0 {
				sc.cursor = part[n-1].seq + 1
			}
			if n < len(part) {
				return nil // stopping
			}
		}
		// Hold no delivered message: the span buffers they alias belong to
		// the consumer now.
		clear(msgs)
	}
}

func (sc *scanner) gone() error {
	if sc.w.ch.deleted.Load() {
		return errors.Wrapf(walimpls.ErrPositionGone, "local: scanner %q of %s at %d: the channel was deleted",
			sc.name, sc.w.info, sc.cursor)
	}
	return errors.Wrapf(walimpls.ErrPositionGone, "local: scanner %q of %s at %d fell behind a truncation up to %d",
		sc.name, sc.w.info, sc.cursor, sc.w.ch.lastRemoved.Load())
}

// maxChunkBytes bounds what a scanner reads and decodes before it hands it
// over, whatever its read-ahead budget: a chunk that no longer fits in the
// CPU's caches is read from memory twice (decoded, then consumed), and the
// kernel's read-ahead keeps the disk busy between chunks anyway. Measured
// on a catch-up of 1 KiB records through the adaptor (8 MiB read-ahead),
// runs alternating: 1 MiB chunks take 0.6-0.75 of the CPU per record that
// 8 MiB chunks took.
const maxChunkBytes = 1 << 20

// next copies the index entries from the cursor on, up to the read-ahead
// budget and maxChunkBytes. With nothing to read it returns the channel to
// wait on; when the cursor has been truncated, or the channel deleted, it
// returns nil, nil.
func (sc *scanner) next() ([]entry, <-chan struct{}) {
	ch := sc.w.ch
	ch.mu.RLock()
	defer ch.mu.RUnlock()
	if ch.deleted.Load() {
		return nil, nil
	}
	if lr := ch.lastRemoved.Load(); lr != 0 && lr >= sc.cursor {
		return nil, nil
	}
	i := sort.Search(len(ch.entries), func(i int) bool { return ch.entries[i].seq >= sc.cursor })
	if i == len(ch.entries) {
		return sc.batch[:0], ch.notify
	}
	batch, bytes, limit := sc.batch[:0], 0, min(sc.budget, maxChunkBytes)
	for ; i < len(ch.entries) && (len(batch) == 0 || bytes+int(ch.entries[i].size) <= limit); i++ {
		batch = append(batch, ch.entries[i])
		bytes += int(ch.entries[i].size)
	}
	sc.batch = batch
	return batch, nil
}

// read reads and decodes the frames of batch. Neighbouring frames of one
// segment are read with one pread as long as the span stays within the
// budget, so a scan of a busy channel costs few system calls. Each span is
// read into a buffer of its own that the decoded payloads alias: one
// allocation per span instead of a copy and an allocation per message
// (measured: the copy costs more than the allocation saves). The buffer is
// never reused, so a delivered message stays valid and unchanged; it is
// freed once the consumer has dropped every message of the span.
//
// The first read of a segment advises the kernel that the file is read
// sequentially, doubling its read-ahead window: the kernel then reads the
// next chunks while this goroutine checks and hands over the current one,
// without the memory of a second chunk counting against the budget.
func (sc *scanner) read(batch []entry) ([]decoded, error) {
	out := sc.decoded[:0]
	for i := 0; i < len(batch); {
		first := batch[i]
		end := int64(first.off) + int64(first.size)
		j := i + 1
		for j < len(batch) && batch[j].seg == first.seg && int64(batch[j].off)+int64(batch[j].size)-int64(first.off) <= int64(sc.budget) {
			end = int64(batch[j].off) + int64(batch[j].size)
			j++
		}
		f := sc.w.s.segmentFile(first.seg)
		if f == nil {
			return nil, errors.Newf("segment %d is gone", first.seg)
		}
		if first.seg != sc.advised {
			sc.advised = first.seg
			if a, ok := f.(sequentialAdviser); ok {
				a.adviseSequential()
			}
		}
		buf := make([]byte, end-int64(first.off))
		if _, err := f.ReadAt(buf, int64(first.off)); err != nil {
			return nil, errors.Wrapf(err, "read segment %d at %d", first.seg, first.off)
		}
		for _, e := range batch[i:j] {
			rel := int(e.off - first.off)
			// The full slice expression keeps a consumer that appends to a
			// payload from writing over the next frame.
			m, err := decodeEntry(buf[rel:rel+int(e.size):rel+int(e.size)], e)
			if err != nil {
				return nil, err
			}
			out = append(out, decoded{seq: e.seq, m: m})
		}
		i = j
	}
	sc.decoded = out
	return out, nil
}

// decodeEntry checks that b holds the message frame e points to.
func decodeEntry(b []byte, e entry) (message.Immutable, error) {
	h, body, _, st := decodeFrame(b, uint32(e.seg))
	if st != frameOK {
		return message.Immutable{}, errors.Wrapf(ErrCorrupt, "segment %d offset %d: %s", e.seg, e.off, st)
	}
	if !isMessage(h.typ) || h.seq != e.seq {
		return message.Immutable{}, errors.Wrapf(ErrCorrupt, "segment %d offset %d: frame type %d seq %d, want a message at seq %d", e.seg, e.off, h.typ, h.seq, e.seq)
	}
	m, err := decodeMessage(h.typ, body, false)
	if err != nil {
		return message.Immutable{}, errors.WithStack(fmt.Errorf("segment %d offset %d: %w: %w", e.seg, e.off, err, ErrCorrupt))
	}
	return message.NewImmutable(m, message.NewSeqID(Name, int64(e.seq))), nil
}
