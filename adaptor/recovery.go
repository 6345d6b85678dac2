package adaptor

// Recovery: what a read-write open learns from the end of the log before
// it writes (the highest timetick and term, and the term-begins it saw),
// found by reading the log and nothing else. recoverEnd and recoverTo are
// functions of the backend and what it delivers; endWindow, which decides
// when a suffix of the log is enough, is pure logic.

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// recovered is what an open learns from the log before its term-begin.
type recovered struct {
	maxTT   uint64
	maxTerm int64
	read    int // messages read
	// begins are the term-begins seen, in log order; the first may stand
	// for the term of the first message read, which began before it.
	begins []termBegin
}

// note records a term-begin read in log order (a repeat is ignored).
func (r *recovered) note(tb termBegin) {
	if n := len(r.begins); n > 0 && !r.begins[n-1].id.LT(tb.id) {
		return
	}
	r.begins = append(r.begins, tb)
}

// firstTailWindow is how many messages from the end an open reads first;
// each window that proves too short is followed by one tailWindowGrowth
// times longer. A longer window costs a few more messages read; a second
// window costs another scanner, which on some backends (Kafka: a client,
// its connections) is the dearer part of an open. 256 holds two
// watermarks of a channel appended to a thousand times a second at the
// default TimeTickInterval, so a busy channel's move reads one window.
const (
	firstTailWindow  = 256
	tailWindowGrowth = 8
)

// recoverEnd reads the log up to last (its last message when the open
// began) and returns the scanner positioned right after it, with the
// highest timetick and term found.
//
// On a backend that fences, only the end of the log is read: windows of
// growing length from the end (cursor.Tail) until one proves that
// nothing before it holds a higher timetick or term (see endWindow), so the
// cost of an open does not grow with the retained log. On a backend that
// cannot fence, a stale owner's messages may follow a newer term-begin
// anywhere, and only the whole log tells the highest term: it is read from
// the start.
//
// Each read asks the backend for readAhead bytes ahead.
func recoverEnd(ctx context.Context, impl walimpls.WALImpl, fencing bool, readAhead int, last message.ID) (walimpls.Scanner, recovered, error) {
	if !fencing {
		s, err := impl.Read(ctx, walimpls.ReadOption{Name: "recovery", DeliverPolicy: cursor.All(), ReadAheadBytes: readAhead})
		if err != nil {
			return nil, recovered{}, err
		}
		var r recovered
		if !last.IsZero() {
			err = recoverTo(ctx, s, &r, func(id message.ID) (bool, error) {
				c, err := id.Compare(last)
				return c >= 0, err
			}, true)
		}
		if err != nil {
			_ = s.Close()
			return nil, recovered{}, err
		}
		return s, r, nil
	}
	// The first window's scanner stays open: it ends at last, where the
	// open reads on. Longer windows read only what lies before the
	// previous one.
	s, err := impl.Read(ctx, walimpls.ReadOption{Name: "recovery", DeliverPolicy: cursor.Tail(firstTailWindow), ReadAheadBytes: readAhead})
	if err != nil {
		return nil, recovered{}, err
	}
	var entries []endEntry
	if !last.IsZero() {
		entries, err = readEntries(ctx, s, func(id message.ID) (bool, bool, error) {
			c, err := id.Compare(last)
			return c >= 0, true, err
		})
	}
	for n := firstTailWindow; err == nil; n *= tailWindowGrowth {
		win := summarize(entries)
		// A window shorter than n holds every kept message.
		if win.enough || len(entries) < n {
			r := recovered{maxTT: win.maxTT, maxTerm: win.maxTerm, read: len(entries)}
			// The term of the window's first message began before it.
			if !win.first.id.IsZero() {
				r.note(win.first)
			}
			for _, tb := range win.begins {
				r.note(tb)
			}
			return s, r, nil
		}
		var before []endEntry
		before, err = readBefore(ctx, impl, readAhead, n*tailWindowGrowth, entries[0].id)
		if err == nil && len(before) == 0 {
			n = len(entries) + 1 // nothing before: the whole log is read
		}
		entries = append(before, entries...)
	}
	_ = s.Close()
	return nil, recovered{}, err
}

// readBefore reads the messages of the last n that lie before end.
func readBefore(ctx context.Context, impl walimpls.WALImpl, readAhead, n int, end message.ID) ([]endEntry, error) {
	s, err := impl.Read(ctx, walimpls.ReadOption{Name: "recovery", DeliverPolicy: cursor.Tail(n), ReadAheadBytes: readAhead})
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.Close() }()
	return readEntries(ctx, s, func(id message.ID) (bool, bool, error) {
		c, err := id.Compare(end)
		return c >= 0, c < 0, err
	})
}

// endEntry is what recovery keeps of a message: not its payload.
type endEntry struct {
	id      message.ID
	kind    message.Kind
	term    int64
	tt      uint64
	hasTerm bool
	hasTT   bool
}

// endedEarly is the error of a recovery read whose scanner s ended before
// the end it was looking for: the scanner's own error kept as the cause.
func endedEarly(s walimpls.Scanner) error {
	<-s.Done() // Error is valid once Done is closed
	if err := s.Error(); err != nil {
		return errors.Wrap(err, "log ended before its end was read")
	}
	return errors.New("log ended before its end was read")
}

// readEntries reads s until stop says a message is the last one to look at;
// include says whether that message is kept.
func readEntries(ctx context.Context, s walimpls.Scanner, stop func(message.ID) (stop, include bool, err error)) ([]endEntry, error) {
	var entries []endEntry
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				return nil, endedEarly(s)
			}
			end, include, err := stop(m.ID())
			if err != nil {
				return nil, err
			}
			if include {
				e := endEntry{id: m.ID(), kind: m.Kind()}
				e.term, e.hasTerm = m.Term()
				e.tt, e.hasTT = m.TimeTick()
				entries = append(entries, e)
			}
			if end {
				return entries, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// endWindow is what an open learns from a suffix of the log, and whether
// that suffix is enough: whether every message before it has a lower
// timetick and a term no higher than the highest the window holds.
//
// On a backend that fences, the log is a sequence of owners' stretches,
// each starting with the owner's term-begin: once an open succeeds, no
// earlier writer stores anything, so everything before a term-begin was
// written by that owner's predecessors, and the owner, which read all of it
// when it opened, allocates every timetick above theirs. An owner's
// watermarks are written one at a time, each once the previous one's
// append returned, and one writer's appends are stored in the order they
// were made. Two proofs follow, either of which makes the window enough:
//
//   - a term-begin followed, before the next term-begin, by a message of
//     its term with a timetick: that timetick is above everything before
//     the term-begin;
//   - two watermarks of one term with no term-begin between them: the
//     second was allocated after the first was stored, so after every
//     message stored before the first, and its timetick is above all of
//     theirs.
//
// Terms only grow along the log on such a backend (a lower open is refused,
// and a fenced writer stores nothing after the fencing open), so no message
// before the window has a term above the window's.
type endWindow struct {
	maxTT   uint64
	maxTerm int64
	begins  []termBegin
	enough  bool
	first   termBegin // the first message with a term, unless a term-begin

	// The current stretch: its term-begin's term when it began inside the
	// window, and the term and count of its watermarks.
	begun       bool
	beginTerm   int64
	wmTerm      int64
	wmInStretch int
}

// summarize looks at entries in log order.
func summarize(entries []endEntry) endWindow {
	var e endWindow
	for _, m := range entries {
		e.add(m)
	}
	return e
}

func (e *endWindow) add(m endEntry) {
	if m.hasTT {
		e.maxTT = max(e.maxTT, m.tt)
	}
	if !m.hasTerm {
		return
	}
	e.maxTerm = max(e.maxTerm, m.term)
	if e.first.id.IsZero() && m.kind != message.KindTermBegin {
		e.first = termBegin{id: m.id, term: m.term}
	}
	if m.kind == message.KindTermBegin {
		e.begins = append(e.begins, termBegin{id: m.id, term: m.term})
		e.begun, e.beginTerm, e.wmInStretch = true, m.term, 0
		return
	}
	if !m.hasTT {
		return
	}
	if e.begun && m.term == e.beginTerm {
		e.enough = true
	}
	if m.kind == message.KindTimeTick {
		if e.wmInStretch > 0 && m.term == e.wmTerm {
			e.enough = true
		}
		e.wmTerm = m.term
		e.wmInStretch++
	}
}

// recoverTo reads s until done says a message ID is the end, noting in r
// the highest timetick, and the term-begins and their highest term, on the
// way. The end message itself is taken into account when inclusive.
func recoverTo(ctx context.Context, s walimpls.Scanner, r *recovered, done func(message.ID) (bool, error), inclusive bool) error {
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				return endedEarly(s)
			}
			end, err := done(m.ID())
			if err != nil {
				return err
			}
			if end && !inclusive {
				return nil
			}
			r.read++
			if tt, ok := m.TimeTick(); ok {
				r.maxTT = max(r.maxTT, tt)
			}
			if m.Kind() == message.KindTermBegin {
				if t, ok := m.Term(); ok {
					r.maxTerm = max(r.maxTerm, t)
					r.note(termBegin{id: m.ID(), term: t})
				}
			}
			if end {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
