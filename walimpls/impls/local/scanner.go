package local

import (
	"sort"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// scanner delivers one channel's messages from a cursor on. Its goroutine
// reads up to budget bytes of frames at a time (the read-ahead), hands them
// over one by one, and waits on the channel's notify channel at the tail.
type scanner struct {
	w      *wal
	name   string
	cursor uint64 // the next seq to deliver; owned by run
	budget int

	out      chan message.Immutable
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	reason   error // why stop was closed; written before close(stop)
	err      error // written by run before close(done)

	batch   []entry   // reused by run
	decoded []decoded // reused by run
}

var _ walimpls.Scanner = (*scanner)(nil)

func newScanner(w *wal, name string, cursor uint64, budget int) *scanner {
	return &scanner{
		w: w, name: name, cursor: cursor, budget: budget,
		out:  make(chan message.Immutable),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// Chan implements walimpls.Scanner.
func (sc *scanner) Chan() <-chan message.Immutable { return sc.out }

// Done implements walimpls.Scanner.
func (sc *scanner) Done() <-chan struct{} { return sc.done }

// Error implements walimpls.Scanner: nil until Done is closed.
func (sc *scanner) Error() error {
	select {
	case <-sc.done:
		return sc.err
	default:
		return nil
	}
}

// Close implements walimpls.Scanner.
func (sc *scanner) Close() error {
	sc.stopWith(nil)
	<-sc.done
	sc.w.forget(sc)
	return nil
}

func (sc *scanner) stopWith(reason error) {
	sc.stopOnce.Do(func() {
		sc.reason = reason
		close(sc.stop)
	})
}

// decoded is a message read ahead, with its seq.
type decoded struct {
	seq uint64
	m   message.Immutable
}

func (sc *scanner) run() {
	defer close(sc.done)
	defer close(sc.out)
	ch := sc.w.ch
	for {
		batch, notify := sc.next()
		if batch == nil && notify == nil {
			sc.err = sc.gone()
			return
		}
		if len(batch) == 0 {
			select {
			case <-notify:
				continue
			case <-sc.stop:
				sc.err = sc.reason
				return
			}
		}
		msgs, err := sc.read(batch)
		if err != nil {
			if ch.lastRemoved.Load() >= batch[0].seq {
				// The records were truncated (and maybe deleted) under us.
				sc.err = sc.gone()
			} else {
				sc.err = errors.Wrapf(err, "local: scanner %q of %s", sc.name, sc.w.info)
			}
			return
		}
		for _, d := range msgs {
			if ch.lastRemoved.Load() >= d.seq {
				sc.err = sc.gone()
				return
			}
			select {
			case sc.out <- d.m:
				sc.cursor = d.seq + 1
			case <-sc.stop:
				sc.err = sc.reason
				return
			}
		}
		// Hold no delivered message: the span buffers they alias belong to
		// the consumer now.
		clear(msgs)
	}
}

func (sc *scanner) gone() error {
	return errors.Wrapf(walimpls.ErrPositionGone, "local: scanner %q of %s at %d fell behind a truncation up to %d",
		sc.name, sc.w.info, sc.cursor, sc.w.ch.lastRemoved.Load())
}

// next copies the index entries from the cursor on, up to the read-ahead
// budget. With nothing to read it returns the channel to wait on; when the
// cursor has been truncated it returns nil, nil.
func (sc *scanner) next() ([]entry, <-chan struct{}) {
	ch := sc.w.ch
	ch.mu.RLock()
	defer ch.mu.RUnlock()
	if lr := ch.lastRemoved.Load(); lr != 0 && lr >= sc.cursor {
		return nil, nil
	}
	i := sort.Search(len(ch.entries), func(i int) bool { return ch.entries[i].seq >= sc.cursor })
	if i == len(ch.entries) {
		return sc.batch[:0], ch.notify
	}
	batch, bytes := sc.batch[:0], 0
	for ; i < len(ch.entries) && (len(batch) == 0 || bytes+int(ch.entries[i].size) <= sc.budget); i++ {
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
// allocation per span instead of a copy and an allocation per message. The
// buffer is never reused, so a delivered message stays valid and
// unchanged; it is freed once the consumer has dropped every message of
// the span.
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
	if h.typ != typeMessage || h.seq != e.seq {
		return message.Immutable{}, errors.Wrapf(ErrCorrupt, "segment %d offset %d: frame type %d seq %d, want a message at seq %d", e.seg, e.off, h.typ, h.seq, e.seq)
	}
	m, err := decodeMessage(body, false)
	if err != nil {
		return message.Immutable{}, errors.Wrapf(ErrCorrupt, "segment %d offset %d: %v", e.seg, e.off, err)
	}
	return message.NewImmutable(m, message.NewSeqID(Name, int64(e.seq))), nil
}
