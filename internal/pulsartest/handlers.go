package pulsartest

import (
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/errors"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Everything in this file runs on the loop goroutine and owns Broker.st.

const (
	serverVersion   = "pulsartest"
	protocolVersion = 20
)

// write encodes a command and queues it on c, not before at (zero: now),
// followed by entry bytes for MESSAGE.
func (b *Broker) write(c *conn, typ protoreflect.EnumNumber, at time.Time, entry []byte, fill func(m msg)) {
	base, body := b.schema.newCommand(typ)
	fill(body)
	bs, err := b.schema.encode(base)
	if err != nil {
		// A required field left unset: a bug in this package.
		b.log.Error("cannot encode command; closing connection", "type", b.schema.typeName(typ), "err", err)
		b.dropConn(c, err)
		return
	}
	c.send(appendFrameHead(make([]byte, 0, 8+len(bs)), bs, len(entry)), entry, at)
}

func (b *Broker) reply(c *conn, typ protoreflect.EnumNumber, fill func(m msg)) {
	b.write(c, typ, time.Time{}, nil, fill)
}

// sendError answers a request with ERROR.
func (b *Broker) sendError(c *conn, requestID uint64, code protoreflect.EnumNumber, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	b.log.Debug("request failed", "conn", c.id, "request", requestID, "code", code, "msg", text)
	b.reply(c, cmdError, func(m msg) {
		m.setU64("request_id", requestID).setEnum("error", code).setStr("message", text)
	})
}

func (b *Broker) success(c *conn, requestID uint64) {
	b.reply(c, cmdSuccess, func(m msg) { m.setU64("request_id", requestID) })
}

// setID fills a MessageIdData. Negative ids go out as their two's
// complement, as the client sends and expects them.
func setID(m msg, p Position) {
	m.setU64("ledgerId", uint64(p.Ledger)).setU64("entryId", uint64(p.Entry))
}

// position reads a MessageIdData; sentinel values come back as -1 or
// math.MaxInt64 (see doc.go).
func position(m msg) Position {
	return Position{int64(m.u64("ledgerId")), int64(m.u64("entryId"))}
}

func isEarliest(p Position) bool { return p.Ledger < 0 && p.Entry < 0 }
func isLatest(p Position) bool   { return p.Ledger == math.MaxInt64 && p.Entry == math.MaxInt64 }

// handle executes one command from c.
func (b *Broker) handle(c *conn, cmd command, payload []byte) {
	if !b.st.conns[c] {
		return // dropped meanwhile
	}
	if cmd.body == nil && cmd.typ != cmdPing && cmd.typ != cmdPong {
		b.unsupported(c, cmd)
		return
	}
	body := msg{cmd.body}
	if !c.connected && cmd.typ != cmdConnect {
		b.dropConn(c, errors.Newf("%s before CONNECT", b.schema.typeName(cmd.typ)))
		return
	}
	switch cmd.typ {
	case cmdConnect:
		b.onConnect(c, body)
	case cmdPing:
		b.reply(c, cmdPong, func(msg) {})
	case cmdPong:
	case cmdPartitionedMetadata:
		b.reply(c, cmdPartitionedMetadataResponse, func(m msg) {
			m.setU64("request_id", body.u64("request_id")).setU32("partitions", 0).
				setEnum("response", metadataSuccess)
		})
	case cmdLookup:
		b.reply(c, cmdLookupResponse, func(m msg) {
			m.setU64("request_id", body.u64("request_id")).setStr("brokerServiceUrl", b.url).
				setEnum("response", lookupConnect).setBool("authoritative", true)
		})
	case cmdProducer:
		b.onProducer(c, body)
	case cmdSend:
		b.onSend(c, body, payload)
	case cmdCloseProducer:
		pid := body.u64("producer_id")
		if p := c.producers[pid]; p != nil {
			b.releaseProducer(p)
		} else if t := c.fenced[pid]; t != nil {
			t.fencedCloses++
		}
		delete(c.fenced, pid)
		b.success(c, body.u64("request_id"))
	case cmdSubscribe:
		b.onSubscribe(c, body)
	case cmdFlow:
		if cons := c.consumers[body.u64("consumer_id")]; cons != nil {
			cons.permits += int64(body.u64("messagePermits"))
			b.dispatch(cons)
		}
	case cmdAck:
		b.onAck(c, body)
	case cmdRedeliverUnacknowledged:
		if cons := c.consumers[body.u64("consumer_id")]; cons != nil && cons.sub.durable {
			cons.readPos = cons.sub.markDelete.next()
			b.dispatch(cons)
		}
	case cmdSeek:
		b.onSeek(c, body)
	case cmdGetLastMessageID:
		b.onGetLastMessageID(c, body)
	case cmdCloseConsumer:
		if cons := c.consumers[body.u64("consumer_id")]; cons != nil {
			b.removeConsumer(cons)
		}
		b.success(c, body.u64("request_id"))
	case cmdUnsubscribe:
		cons := c.consumers[body.u64("consumer_id")]
		if cons == nil {
			b.sendError(c, body.u64("request_id"), errConsumerNotFound, "consumer %d not found", body.u64("consumer_id"))
			return
		}
		b.removeConsumer(cons)
		delete(cons.t.subs, cons.sub.name)
		b.success(c, body.u64("request_id"))
	default:
		b.unsupported(c, cmd)
	}
}

// unsupported answers a command the broker does not implement: ERROR when
// it carries a request id, otherwise the connection is closed, so that the
// client never waits for an answer that will not come.
func (b *Broker) unsupported(c *conn, cmd command) {
	name := b.schema.typeName(cmd.typ)
	if cmd.body != nil {
		if fd := cmd.body.Descriptor().Fields().ByName("request_id"); fd != nil && cmd.body.Has(fd) {
			b.log.Warn("unsupported command", "conn", c.id, "type", name)
			b.sendError(c, cmd.body.Get(fd).Uint(), errNotAllowed, "pulsartest: command %s is not supported", name)
			return
		}
	}
	b.dropConn(c, errors.Newf("unsupported command %s without request id", name))
}

func (b *Broker) onConnect(c *conn, body msg) {
	version := body.i32("protocol_version")
	if version > protocolVersion {
		version = protocolVersion
	}
	c.connected = true
	b.reply(c, cmdConnected, func(m msg) {
		m.setStr("server_version", serverVersion).setI32("protocol_version", version).
			setI32("max_message_size", b.cfg.MaxMessageSize)
	})
}

// dropConn forgets a connection: its producers and consumers go away as if
// closed, and the socket is closed. Idempotent.
func (b *Broker) dropConn(c *conn, cause error) {
	if !b.st.conns[c] {
		return
	}
	delete(b.st.conns, c)
	b.log.Debug("connection closed", "conn", c.id, "remote", c.remote, "cause", cause.Error())
	for _, p := range c.producers {
		b.releaseProducer(p)
	}
	for _, cons := range c.consumers {
		b.removeConsumer(cons)
	}
	c.shutdown()
}

// topicFor returns the topic a PRODUCER or SUBSCRIBE names, creating it
// when allowed.
func (b *Broker) topicFor(name string, create bool) *topic {
	t := b.st.topics[name]
	if t == nil && create && !b.cfg.DisableAutoTopicCreation {
		t = newTopic(name, b.st.newLedger())
		b.st.topics[name] = t
	}
	return t
}

// unload closes every producer and consumer of t from the broker side and
// moves the topic to a new ledger; queued exclusive producers are granted.
func (b *Broker) unload(t *topic) {
	b.closeProducers(t)
	b.closeConsumers(t)
	t.rollLedger(b.st.newLedger())
	b.grantWaiters(t)
}

// removeTopic deletes t as a forced delete does: its granted producers
// and its consumers are closed from the broker side (the clients
// reconnect), its queued WaitForExclusive producers are refused with
// TopicNotFound, and the topic is forgotten with its entries,
// subscriptions, epoch and deduplication state. A client that comes back
// finds no topic: it creates a new, empty one if auto-creation is on.
func (b *Broker) removeTopic(t *topic) {
	b.closeProducers(t)
	for _, w := range t.waiters {
		delete(w.c.producers, w.id)
		b.sendError(w.c, w.requestID, errTopicNotFound, "topic %s was deleted", t.name)
	}
	t.waiters = nil
	b.closeConsumers(t)
	delete(b.st.topics, t.name)
}

// closeProducers closes every granted producer of t from the broker side
// (CLOSE_PRODUCER); the clients reconnect.
func (b *Broker) closeProducers(t *topic) {
	for p := range t.producers {
		b.st.nextRequest++
		id := b.st.nextRequest
		b.reply(p.c, cmdCloseProducer, func(m msg) { m.setU64("producer_id", p.id).setU64("request_id", id) })
		delete(p.c.producers, p.id)
		delete(t.producers, p)
	}
	t.exclusive = false
}

// closeConsumers closes every consumer of t from the broker side
// (CLOSE_CONSUMER); the clients resubscribe.
func (b *Broker) closeConsumers(t *topic) {
	for _, s := range t.subs {
		if cons := s.consumer; cons != nil {
			b.st.nextRequest++
			id := b.st.nextRequest
			b.reply(cons.c, cmdCloseConsumer, func(m msg) { m.setU64("consumer_id", cons.id).setU64("request_id", id) })
			b.removeConsumer(cons)
		}
	}
}

// --- producers ---

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

// --- consumers ---

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
