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
