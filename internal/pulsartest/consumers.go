package pulsartest

import (
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
)

// Consumers: subscriptions, dispatch, acks, seeks and the last message ID.

func (b *Broker) onSubscribe(c *conn, body msg) {
	reqID := body.u64("request_id")
	cid := body.u64("consumer_id")
	name, subName := body.str("topic"), body.str("subscription")
	durable := !body.has("durable") || body.boolean("durable")
	if old := c.consumers[cid]; old != nil {
		if old.t.name == name && old.sub.name == subName {
			b.success(c, reqID)
			return
		}
		b.sendError(c, reqID, errConsumerBusy, "consumer id %d already in use", cid)
		return
	}
	if st := body.enum("subType"); st != subExclusive {
		b.sendError(c, reqID, errNotAllowed, "pulsartest: subscription type %d is not supported (only Exclusive)", st)
		return
	}
	force := !body.has("force_topic_creation") || body.boolean("force_topic_creation")
	t := b.topicFor(name, force)
	if t == nil {
		b.sendError(c, reqID, errTopicNotFound, "topic %s not found", name)
		return
	}
	s := t.subs[subName]
	if s != nil && s.consumer != nil && s.consumer.c.readerGone.Load() {
		b.dropConn(s.consumer.c, errors.New("replaced by a reconnecting consumer"))
		s = t.subs[subName]
	}
	if s != nil && (s.consumer != nil || s.durable != durable) {
		b.sendError(c, reqID, errConsumerBusy, "subscription %s on %s is busy", subName, t.name)
		return
	}
	var start Position
	if durable {
		if s == nil {
			s = &subscription{name: subName, durable: true, acked: map[Position]bool{}, markDelete: t.last}
			if body.enum("initialPosition") == initialEarliest {
				s.markDelete = t.trimmed
			}
			t.subs[subName] = s
		}
		start = s.markDelete.next()
	} else {
		start = t.nextPos()
		if id, ok := body.sub("start_message_id"); ok {
			p := position(id)
			switch {
			case isEarliest(p):
				start = minPosition()
			case isLatest(p):
			default:
				if t.gone(p) {
					b.sendError(c, reqID, errNotAllowed, "%s", goneMessage(t, p))
					return
				}
				start = p
			}
		} else if body.enum("initialPosition") == initialEarliest {
			start = minPosition()
		}
		s = &subscription{name: subName}
		t.subs[subName] = s
	}
	b.log.Debug("subscribe", "conn", c.id, "topic", t.name, "sub", subName, "durable", durable, "start", start)
	cons := &consumer{c: c, id: cid, t: t, sub: s, readPos: start}
	s.consumer = cons
	c.consumers[cid] = cons
	b.success(c, reqID)
}

// GoneMessage is the text of the error a reader gets when it asks for a
// position whose entries were deleted (CreateReader and Seek return it in
// "server error: NotAllowedError: <text>").
const GoneMessage = "pulsartest: start position trimmed"

func goneMessage(t *topic, p Position) string {
	return fmt.Sprintf("%s: %d:%d is below the first retained entry of %s (deleted up to %d:%d)",
		GoneMessage, p.Ledger, p.Entry, t.name, t.trimmed.Ledger, t.trimmed.Entry)
}

// removeConsumer detaches a consumer; a non-durable subscription goes with it.
func (b *Broker) removeConsumer(cons *consumer) {
	delete(cons.c.consumers, cons.id)
	if cons.sub.consumer == cons {
		cons.sub.consumer = nil
		if !cons.sub.durable {
			delete(cons.t.subs, cons.sub.name)
		}
	}
}

// dispatch sends entries to cons while it has permits. A batch entry costs
// its number of messages; permits may go negative, as in Pulsar.
func (b *Broker) dispatch(cons *consumer) {
	t := cons.t
	for cons.permits > 0 {
		i := t.search(cons.readPos)
		if cons.sub.durable {
			for i < len(t.entries) && cons.sub.acked[t.entries[i].pos] {
				i++
			}
		}
		if i == len(t.entries) {
			return
		}
		e := t.entries[i]
		b.write(cons.c, cmdMessage, time.Time{}, e.data, func(m msg) {
			m.setU64("consumer_id", cons.id)
			setID(m.mutable("message_id"), e.pos)
		})
		cons.permits -= int64(e.info.numMessages)
		cons.readPos = e.pos.next()
	}
}

func (b *Broker) onAck(c *conn, body msg) {
	cons := c.consumers[body.u64("consumer_id")]
	hasReq := body.has("request_id")
	if cons == nil {
		if hasReq {
			b.reply(c, cmdAckResponse, func(m msg) {
				m.setU64("consumer_id", body.u64("consumer_id")).setU64("request_id", body.u64("request_id")).
					setEnum("error", errConsumerNotFound).setStr("message", "consumer not found")
			})
		}
		return
	}
	if cons.sub.durable {
		cumulative := body.enum("ack_type") == ackCumulative
		for _, id := range body.list("message_id") {
			p := position(id)
			partial := id.count("ack_set") > 0 // some messages of a batch only
			switch {
			case cumulative && partial:
				cons.sub.ackCumulative(cons.t, p.before())
			case cumulative:
				cons.sub.ackCumulative(cons.t, p)
			case !partial:
				cons.sub.ack(cons.t, p)
			}
		}
	}
	if hasReq {
		b.reply(c, cmdAckResponse, func(m msg) {
			m.setU64("consumer_id", cons.id).setU64("request_id", body.u64("request_id"))
		})
	}
}

func (b *Broker) onSeek(c *conn, body msg) {
	reqID := body.u64("request_id")
	cons := c.consumers[body.u64("consumer_id")]
	if cons == nil {
		b.sendError(c, reqID, errConsumerNotFound, "consumer %d not found", body.u64("consumer_id"))
		return
	}
	id, ok := body.sub("message_id")
	if !ok {
		b.sendError(c, reqID, errNotAllowed, "pulsartest: seek by publish time is not supported")
		return
	}
	t, p := cons.t, position(id)
	switch {
	case isEarliest(p):
		p = t.trimmed.next()
	case isLatest(p):
		p = t.nextPos()
	case t.gone(p):
		b.sendError(c, reqID, errNotAllowed, "%s", goneMessage(t, p))
		return
	}
	if cons.sub.durable {
		cons.sub.reset(t, p)
	}
	// The client reconnects after CLOSE_CONSUMER, with the sought id as
	// its start position (the durable cursor for a subscription).
	b.success(c, reqID)
	b.st.nextRequest++
	closeID := b.st.nextRequest
	b.reply(c, cmdCloseConsumer, func(m msg) { m.setU64("consumer_id", cons.id).setU64("request_id", closeID) })
	b.removeConsumer(cons)
}

func (b *Broker) onGetLastMessageID(c *conn, body msg) {
	reqID := body.u64("request_id")
	cons := c.consumers[body.u64("consumer_id")]
	if cons == nil {
		b.sendError(c, reqID, errConsumerNotFound, "consumer %d not found", body.u64("consumer_id"))
		return
	}
	t := cons.t
	mark := cons.readPos.before()
	if cons.sub.durable {
		mark = cons.sub.markDelete
	}
	b.reply(c, cmdGetLastMessageIDResponse, func(m msg) {
		m.setU64("request_id", reqID)
		last := m.mutable("last_message_id")
		setID(last, t.last)
		last.setI32("partition", -1)
		if t.last.Entry >= 0 {
			last.setI32("batch_index", t.lastBatchIndex)
		}
		setID(m.mutable("consumer_mark_delete_position"), mark)
	})
}
