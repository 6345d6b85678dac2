package pulsartest

import (
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Producers: creation, the exclusive-access queue, sends and receipts.

func (b *Broker) onProducer(c *conn, body msg) {
	reqID := body.u64("request_id")
	pid := body.u64("producer_id")
	name := body.str("topic")
	if old := c.producers[pid]; old != nil {
		if old.t.name != name {
			b.sendError(c, reqID, errProducerBusy, "producer id %d already in use", pid)
			return
		}
		if !old.waiting { // a retried request: answer again
			b.producerSuccess(old, reqID, true)
		}
		return
	}
	t := b.topicFor(name, true)
	if t == nil {
		b.sendError(c, reqID, errTopicNotFound, "topic %s not found", name)
		return
	}
	pname := body.str("producer_name")
	if pname == "" {
		b.st.nextName++
		pname = fmt.Sprintf("pulsartest-%d-%d", c.id, b.st.nextName)
	}
	// A producer of the same name is the same client producer coming back
	// on a new connection; if its old connection is already gone, drop it
	// now, else the client retries (ProducerBusy is retryable).
	for _, other := range b.sameName(t, pname) {
		if other.c.readerGone.Load() {
			b.dropConn(other.c, errors.New("replaced by a reconnecting producer"))
			continue
		}
		b.sendError(c, reqID, errProducerBusy, "producer with name %s is already connected to %s", pname, t.name)
		return
	}
	p := &producer{c: c, id: pid, name: pname, t: t, mode: body.enum("producer_access_mode"), requestID: reqID}
	hasEpoch := body.has("topic_epoch")
	epoch := body.u64("topic_epoch")
	switch p.mode {
	case accessShared:
		if t.exclusive || len(t.waiters) > 0 {
			b.sendError(c, reqID, errProducerBusy, "topic %s has an exclusive producer", t.name)
			return
		}
	case accessExclusive, accessWaitForExclusive:
		if hasEpoch && epoch < t.epoch {
			t.fencedRefusals++
			c.fenced[pid] = t
			b.sendError(c, reqID, errProducerFenced, "producer topic epoch %d is below topic epoch %d of %s", epoch, t.epoch, t.name)
			return
		}
		if len(t.producers) > 0 {
			if p.mode == accessExclusive {
				t.fencedRefusals++
				c.fenced[pid] = t
				b.sendError(c, reqID, errProducerFenced, "topic %s has an existing producer", t.name)
				return
			}
			p.waiting = true
			c.producers[pid] = p
			t.waiters = append(t.waiters, p)
			b.producerSuccess(p, reqID, false)
			return
		}
		if hasEpoch {
			t.epoch = max(t.epoch, epoch)
		} else {
			t.epoch++
		}
		t.exclusive = true
	default:
		b.sendError(c, reqID, errNotAllowed, "producer access mode %d is not supported", p.mode)
		return
	}
	c.producers[pid] = p
	t.producers[p] = true
	b.producerSuccess(p, reqID, true)
}

// sameName lists t's producers (granted or waiting) named name.
func (b *Broker) sameName(t *topic, name string) []*producer {
	var out []*producer
	for p := range t.producers {
		if p.name == name {
			out = append(out, p)
		}
	}
	for _, p := range t.waiters {
		if p.name == name {
			out = append(out, p)
		}
	}
	return out
}

func (b *Broker) producerSuccess(p *producer, reqID uint64, ready bool) {
	last := int64(-1)
	if s, ok := p.t.dedup[p.name]; ok && b.cfg.Deduplication {
		last = int64(s)
	}
	b.reply(p.c, cmdProducerSuccess, func(m msg) {
		m.setU64("request_id", reqID).setStr("producer_name", p.name).setI64("last_sequence_id", last).
			setBool("producer_ready", ready)
		if p.mode != accessShared && ready {
			m.setU64("topic_epoch", p.t.epoch)
		}
	})
}

// releaseProducer removes a producer (closed, or its connection gone) and
// hands exclusive access to the next waiter.
func (b *Broker) releaseProducer(p *producer) {
	t := p.t
	delete(p.c.producers, p.id)
	if p.waiting {
		for i, w := range t.waiters {
			if w == p {
				t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
				break
			}
		}
		return
	}
	delete(t.producers, p)
	if len(t.producers) == 0 {
		t.exclusive = false
	}
	b.grantWaiters(t)
}

// grantWaiters gives exclusive access to the first queued WaitForExclusive
// producer when the topic has no producer, bumping the topic epoch.
func (b *Broker) grantWaiters(t *topic) {
	for len(t.producers) == 0 && len(t.waiters) > 0 {
		w := t.waiters[0]
		t.waiters = t.waiters[1:]
		w.waiting = false
		t.epoch++
		t.exclusive = true
		t.producers[w] = true
		b.producerSuccess(w, w.requestID, true)
	}
}

func (b *Broker) onSend(c *conn, body msg, payload []byte) {
	pid, seq := body.u64("producer_id"), body.u64("sequence_id")
	p := c.producers[pid]
	if p == nil || p.waiting || p.broken {
		// Closed by the broker (unload), failed, or not granted: the client
		// resends its pending messages when it reconnects.
		b.log.Debug("send dropped", "conn", c.id, "producer", pid, "seq", seq)
		return
	}
	t := p.t
	highest := max(seq, body.u64("highest_sequence_id"))
	info, err := parseEntry(payload, b.crc)
	switch {
	case errors.Is(err, errChecksum):
		// As Pulsar's Producer.checkAndStartPublish: the message is
		// refused, the producer stays, and the SENDs after it are served,
		// so a client may resend it on the same connection.
		b.refuseSend(p, highest, errChecksumCode, "pulsartest: checksum failed on the broker: "+err.Error())
		return
	case err != nil:
		b.failSend(p, highest, errUnknown, err.Error())
		return
	}
	if t.sendErrors > 0 {
		t.sendErrors--
		b.failSend(p, highest, errPersistence, "pulsartest: injected send error")
		return
	}
	switch {
	case t.stallAfter == 0:
		// Stalled (StallSends): neither stored nor answered.
		b.log.Debug("send stalled", "conn", c.id, "producer", pid, "seq", seq)
		return
	case t.stallAfter > 0:
		t.stallAfter--
	}
	if b.cfg.Deduplication {
		if last, ok := t.dedup[p.name]; ok && highest <= last {
			b.receipt(p, seq, highest, b.duplicatePosition(t, p.name, seq))
			return
		}
		t.dedup[p.name] = highest
	}
	e := t.append(payload, info, p.name, seq, highest)
	b.receipt(p, seq, highest, e.pos)
	for _, s := range t.subs {
		if s.consumer != nil {
			b.dispatch(s.consumer)
		}
	}
}

// duplicatePositionWindow bounds the backward search for a duplicate.
const duplicatePositionWindow = 1 << 16

// duplicatePosition finds the stored entry of a duplicate SEND, or -1:-1.
func (b *Broker) duplicatePosition(t *topic, name string, seq uint64) Position {
	for i, n := len(t.entries)-1, 0; i >= 0 && n < duplicatePositionWindow; i, n = i-1, n+1 {
		if e := t.entries[i]; e.producer == name && e.seq <= seq && seq <= e.highestSeq {
			return e.pos
		}
	}
	return Position{-1, -1}
}

func (b *Broker) receipt(p *producer, seq, highest uint64, pos Position) {
	var at time.Time
	if d := b.st.receiptDelay; d > 0 {
		at = b.cfg.Clock.Now().Add(d)
	}
	b.write(p.c, cmdSendReceipt, at, nil, func(m msg) {
		m.setU64("producer_id", p.id).setU64("sequence_id", seq).setU64("highest_sequence_id", highest)
		setID(m.mutable("message_id"), pos)
	})
}

// refuseSend answers one SEND with SEND_ERROR. seq is the SEND's highest
// sequence id, as Pulsar reports it.
func (b *Broker) refuseSend(p *producer, seq uint64, code protoreflect.EnumNumber, text string) {
	b.log.Debug("send failed", "conn", p.c.id, "producer", p.name, "seq", seq, "msg", text)
	b.reply(p.c, cmdSendError, func(m msg) {
		m.setU64("producer_id", p.id).setU64("sequence_id", seq).setEnum("error", code).setStr("message", text)
	})
}

// failSend answers SEND_ERROR and drops the registration's later SENDs.
func (b *Broker) failSend(p *producer, seq uint64, code protoreflect.EnumNumber, text string) {
	p.broken = true
	b.refuseSend(p, seq, code, text)
}
