package adaptor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// A split message is written as n parts, in order, by one appender. Every
// part is a KindPart message carrying the writer's term and the message's
// timetick, with the part header "index/count" in message.KeyPartHeader.
// Part 0 carries the original message's properties; the payload is cut into
// consecutive chunks. (term, timetick) identifies the message: timeticks are
// unique per channel, and retries reuse them.

// splitMessage cuts m (already carrying kind, term and timetick) into parts
// whose Size stays within partBytes.
func splitMessage(m message.Message, partBytes int) ([]message.Message, error) {
	props := m.Properties().All()
	propBytes := 0
	for k, v := range props {
		propBytes += len(k) + len(v)
	}
	first := partBytes - propBytes - partOverhead
	rest := partBytes - partOverhead
	if first <= 0 {
		return nil, &walimpls.TooLargeError{Size: propBytes + partOverhead, Limit: partBytes, What: "a part (PartBytes; the properties must fit in the first part)"}
	}
	payload := m.Payload()
	n := 1
	if len(payload) > first {
		n += (len(payload) - first + rest - 1) / rest
	}
	term, _ := m.Term()
	tt, _ := m.TimeTick()
	parts := make([]message.Message, 0, n)
	for i := 0; i < n; i++ {
		var chunk []byte
		var p map[string]string
		if i == 0 {
			chunk = payload[:min(first, len(payload))]
			p = props
		} else {
			start := first + (i-1)*rest
			chunk = payload[start:min(start+rest, len(payload))]
			p = map[string]string{}
		}
		pm := message.Restore(chunk, p).WithKind(message.KindPart).WithTerm(term).WithTimeTick(tt)
		pm, _ = pm.WithReserved(message.KeyPartHeader, fmt.Sprintf("%d/%d", i, n))
		parts = append(parts, pm)
	}
	return parts, nil
}

// partHeader decodes "index/count".
func partHeader(m message.Message) (index, count int, err error) {
	h, _ := m.Properties().Get(message.KeyPartHeader)
	a, b, ok := strings.Cut(h, "/")
	if ok {
		index, err = strconv.Atoi(a)
		if err == nil {
			count, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || count < 1 || index < 0 || index >= count {
		return 0, 0, errors.Wrapf(message.ErrBadProperty, "part header %q", h)
	}
	return index, count, nil
}

type partKey struct {
	term int64
	tt   uint64
}

// partial is a split message being joined.
type partial struct {
	firstID message.ID
	lowID   message.ID // the lowest ID of a part read so far
	props   map[string]string
	chunks  [][]byte
	have    int
	bytes   int
}

// joiner joins the parts of split messages. Pure logic, owned by a scanner.
type joiner struct {
	partials map[partKey]*partial
	// done remembers joined messages until a watermark covers them, so that
	// a part retried after its message completed counts as a duplicate.
	done  map[partKey]struct{}
	bytes int
}

func newJoiner() *joiner {
	return &joiner{partials: map[partKey]*partial{}, done: map[partKey]struct{}{}}
}

// joinResult says what add did with a part.
type joinResult int

const (
	partHeld joinResult = iota
	partCompleted
	partDuplicate
	partMalformed
)

// add takes a part. When it completes its message, the joined message is
// returned, identified by its first part's ID.
func (j *joiner) add(m message.Immutable) (message.Immutable, joinResult) {
	index, count, err := partHeader(m.Message)
	term, _ := m.Term()
	tt, okTT := m.TimeTick()
	if err != nil || !okTT {
		return message.Immutable{}, partMalformed
	}
	key := partKey{term: term, tt: tt}
	if _, done := j.done[key]; done {
		return message.Immutable{}, partDuplicate
	}
	p, ok := j.partials[key]
	if !ok {
		p = &partial{chunks: make([][]byte, count)}
		j.partials[key] = p
	}
	if len(p.chunks) != count {
		return message.Immutable{}, partMalformed
	}
	if p.chunks[index] != nil {
		return message.Immutable{}, partDuplicate
	}
	chunk := m.Payload()
	if chunk == nil {
		chunk = []byte{}
	}
	if p.lowID.IsZero() || m.ID().LT(p.lowID) {
		p.lowID = m.ID()
	}
	p.chunks[index] = chunk
	p.have++
	p.bytes += len(chunk)
	j.bytes += len(chunk)
	if index == 0 {
		p.firstID = m.ID()
		p.props = m.Properties().All()
	}
	if p.have < count {
		return message.Immutable{}, partHeld
	}
	delete(j.partials, key)
	j.done[key] = struct{}{}
	j.bytes -= p.bytes
	payload := make([]byte, 0, p.bytes)
	for _, c := range p.chunks {
		payload = append(payload, c...)
	}
	props := p.props
	delete(props, message.KeyPartHeader)
	joined := message.Restore(payload, props).WithKind(message.KindData)
	return message.NewImmutable(joined, p.firstID), partCompleted
}

// pendingLow returns the lowest ID of a part of a message not complete yet
// (the zero ID when none is): a scanner resuming after it would miss that
// part, and never join its message.
func (j *joiner) pendingLow() message.ID {
	var low message.ID
	for _, p := range j.partials {
		if low.IsZero() || p.lowID.LT(low) {
			low = p.lowID
		}
	}
	return low
}

// dropUpTo forgets incomplete messages with a timetick at or below w (all
// their parts would have arrived before watermark w), or with a term below
// minTerm; it returns how many it dropped.
func (j *joiner) dropUpTo(w uint64, minTerm int64) int {
	for k := range j.done {
		if k.tt <= w || k.term < minTerm {
			delete(j.done, k)
		}
	}
	n := 0
	for k, p := range j.partials {
		if k.tt <= w || k.term < minTerm {
			j.bytes -= p.bytes
			delete(j.partials, k)
			n++
		}
	}
	return n
}
