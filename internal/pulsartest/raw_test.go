package pulsartest

import (
	"bufio"
	"encoding/binary"
	"hash/crc32"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// rawClient speaks the protocol by hand, for what pulsar-client-go never sends.
type rawClient struct {
	t  *testing.T
	s  *schema
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t *testing.T, b *Broker) *rawClient {
	s, err := newSchema()
	require.NoError(t, err)
	nc, err := net.Dial("tcp", strings.TrimPrefix(b.URL(), "pulsar://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	return &rawClient{t: t, s: s, nc: nc, r: bufio.NewReader(nc)}
}

func (c *rawClient) send(typ protoreflect.EnumNumber, payload []byte, fill func(m msg)) {
	base, body := c.s.newCommand(typ)
	fill(body)
	bs, err := c.s.marshal.Marshal(base.Interface())
	require.NoError(c.t, err)
	_, err = c.nc.Write(appendFrame(nil, bs, payload))
	require.NoError(c.t, err)
}

func (c *rawClient) recv() (command, []byte, error) {
	f, err := readFrame(c.r, 1<<30)
	if err != nil {
		return command{}, nil, err
	}
	cmd, err := c.s.decode(f.cmd)
	require.NoError(c.t, err)
	return cmd, f.payload, nil
}

func (c *rawClient) expect(typ protoreflect.EnumNumber) msg {
	cmd, _, err := c.recv()
	require.NoError(c.t, err)
	require.Equal(c.t, c.s.typeName(typ), c.s.typeName(cmd.typ))
	return msg{cmd.body}
}

func (c *rawClient) connect() {
	c.send(cmdConnect, nil, func(m msg) { m.setStr("client_version", "raw").setI32("protocol_version", 20) })
	c.expect(cmdConnected)
}

// entryBytes builds a SEND payload: magic, CRC32-C, metadata, payload.
func entryBytes(payload string, numInBatch int) []byte {
	var meta []byte
	meta = protowire.AppendTag(meta, 1, protowire.BytesType)
	meta = protowire.AppendString(meta, "raw")
	meta = protowire.AppendTag(meta, 2, protowire.VarintType)
	meta = protowire.AppendVarint(meta, 0)
	meta = protowire.AppendTag(meta, 3, protowire.VarintType)
	meta = protowire.AppendVarint(meta, 1)
	if numInBatch > 0 {
		meta = protowire.AppendTag(meta, metadataNumMessagesInBatch, protowire.VarintType)
		meta = protowire.AppendVarint(meta, uint64(numInBatch))
	}
	body := binary.BigEndian.AppendUint32(nil, uint32(len(meta)))
	body = append(append(body, meta...), payload...)
	out := binary.BigEndian.AppendUint16(nil, magicCRC32C)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	return append(out, body...)
}

// TestRawChecksumMismatch: a SEND whose checksum does not match is refused
// with SEND_ERROR ChecksumError and not stored, and the producer stays, as
// in Pulsar (Producer.checkAndStartPublish): SENDs behind it on the same
// connection are served, and the refused message resent on the same
// connection is stored. The error carries the SEND's highest sequence id.
func TestRawChecksumMismatch(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.connect()
	topic := "persistent://public/default/raw"
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", topic).setU64("producer_id", 1).setU64("request_id", 1)
	})
	ok := c.expect(cmdProducerSuccess)
	require.NotEmpty(t, ok.str("producer_name"))
	send := func(seq, highest uint64, e []byte) {
		c.send(cmdSend, e, func(m msg) {
			m.setU64("producer_id", 1).setU64("sequence_id", seq)
			if highest > 0 {
				m.setU64("highest_sequence_id", highest)
			}
		})
	}
	corrupt := func(payload string) []byte {
		e := entryBytes(payload, 0)
		e[len(e)-1] ^= 0xff
		return e
	}
	expectReceipt := func(seq uint64) {
		t.Helper()
		require.Equal(t, seq, c.expect(cmdSendReceipt).u64("sequence_id"))
	}
	expectChecksumError := func(seq uint64) {
		t.Helper()
		se := c.expect(cmdSendError)
		require.Equal(t, errChecksumCode, se.enum("error"))
		require.Equal(t, uint64(1), se.u64("producer_id"))
		require.Equal(t, seq, se.u64("sequence_id"))
	}

	send(0, 0, entryBytes("m0", 0))
	expectReceipt(0)
	send(1, 0, corrupt("m1"))
	expectChecksumError(1)
	send(1, 0, entryBytes("m1", 0)) // resent on the same connection
	expectReceipt(1)

	// Pipelined: the SEND behind a corrupt one is stored, answers stay in
	// order.
	send(2, 0, corrupt("m2"))
	send(3, 0, entryBytes("m3", 0))
	expectChecksumError(2)
	expectReceipt(3)

	// A batch SEND's error names its highest sequence id.
	send(4, 6, corrupt("batch"))
	expectChecksumError(6)
	send(4, 6, entryBytes("batch", 3))
	expectReceipt(4)

	st, err := b.Stats(topic)
	require.NoError(t, err)
	require.Equal(t, 4, st.Entries)

	// What is stored is exactly the good SENDs, in order.
	c.send(cmdSubscribe, nil, func(m msg) {
		m.setStr("topic", topic).setStr("subscription", "r").setEnum("subType", subExclusive).
			setU64("consumer_id", 1).setU64("request_id", 2).setBool("durable", false)
		setID(m.mutable("start_message_id"), Position{-1, -1})
	})
	c.expect(cmdSuccess)
	c.send(cmdFlow, nil, func(m msg) { m.setU64("consumer_id", 1).setU32("messagePermits", 100) })
	for _, want := range [][]byte{entryBytes("m0", 0), entryBytes("m1", 0), entryBytes("m3", 0), entryBytes("batch", 3)} {
		cmd, payload, err := c.recv()
		require.NoError(t, err)
		require.Equal(t, cmdMessage, cmd.typ)
		require.Equal(t, want, payload)
	}
}

func TestRawUnsupportedCommand(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.connect()
	// GET_SCHEMA (34) carries a request id: answered with ERROR.
	c.send(34, nil, func(m msg) { m.setU64("request_id", 7).setStr("topic", "persistent://public/default/x") })
	e := c.expect(cmdError)
	require.Equal(t, uint64(7), e.u64("request_id"))
	require.Contains(t, e.str("message"), "GET_SCHEMA")
	// PING still works afterwards.
	c.send(cmdPing, nil, func(msg) {})
	c.expect(cmdPong)
}

func TestRawCommandBeforeConnect(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.send(cmdPing, nil, func(msg) {})
	_, _, err := c.recv()
	require.Error(t, err, "connection must be closed")
}

func TestRawFrameTooLarge(t *testing.T) {
	b := Start(t, Config{MaxMessageSize: 1024})
	c := dialRaw(t, b)
	c.connect()
	c.send(cmdSend, make([]byte, 1024+framePadding+1), func(m msg) { m.setU64("producer_id", 1).setU64("sequence_id", 0) })
	_, _, err := c.recv()
	require.Error(t, err, "connection must be closed")
}

func TestRawWaitForExclusiveFencedOnStaleEpoch(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.connect()
	topic := "persistent://public/default/epoch"
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", topic).setU64("producer_id", 1).setU64("request_id", 1).
			setEnum("producer_access_mode", accessExclusive)
	})
	require.Equal(t, uint64(1), c.expect(cmdProducerSuccess).u64("topic_epoch"))
	c.send(cmdCloseProducer, nil, func(m msg) { m.setU64("producer_id", 1).setU64("request_id", 2) })
	c.expect(cmdSuccess)
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", topic).setU64("producer_id", 2).setU64("request_id", 3).
			setEnum("producer_access_mode", accessExclusive)
	})
	require.Equal(t, uint64(2), c.expect(cmdProducerSuccess).u64("topic_epoch"))
	// A WaitForExclusive producer coming back with epoch 1 is fenced at
	// once rather than queued.
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", topic).setU64("producer_id", 3).setU64("request_id", 4).
			setEnum("producer_access_mode", accessWaitForExclusive).setU64("topic_epoch", 1)
	})
	e := c.expect(cmdError)
	require.Equal(t, errProducerFenced, e.enum("error"))
}

func TestRawGetLastMessageIDBatch(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.connect()
	topic := "persistent://public/default/last"
	c.send(cmdSubscribe, nil, func(m msg) {
		m.setStr("topic", topic).setStr("subscription", "r").setEnum("subType", subExclusive).
			setU64("consumer_id", 1).setU64("request_id", 1).setBool("durable", false)
	})
	c.expect(cmdSuccess)
	c.send(cmdGetLastMessageID, nil, func(m msg) { m.setU64("consumer_id", 1).setU64("request_id", 2) })
	last, _ := c.expect(cmdGetLastMessageIDResponse).sub("last_message_id")
	require.Equal(t, int64(-1), int64(last.u64("entryId")))

	c.send(cmdProducer, nil, func(m msg) { m.setStr("topic", topic).setU64("producer_id", 1).setU64("request_id", 3) })
	c.expect(cmdProducerSuccess)
	c.send(cmdSend, entryBytes("batch", 3), func(m msg) { m.setU64("producer_id", 1).setU64("sequence_id", 0).setI32("num_messages", 3) })
	c.expect(cmdSendReceipt)
	c.send(cmdGetLastMessageID, nil, func(m msg) { m.setU64("consumer_id", 1).setU64("request_id", 4) })
	last, _ = c.expect(cmdGetLastMessageIDResponse).sub("last_message_id")
	require.Equal(t, uint64(0), last.u64("entryId"))
	require.Equal(t, int32(2), last.i32("batch_index"))

	// FLOW of 1 permit still delivers the whole batch entry, unchanged.
	c.send(cmdFlow, nil, func(m msg) { m.setU64("consumer_id", 1).setU32("messagePermits", 1) })
	cmd, payload, err := c.recv()
	require.NoError(t, err)
	require.Equal(t, cmdMessage, cmd.typ)
	require.Equal(t, entryBytes("batch", 3), payload)

	// A message sent without batching: batch index -1.
	c.send(cmdSend, entryBytes("single", 0), func(m msg) { m.setU64("producer_id", 1).setU64("sequence_id", 3) })
	c.expect(cmdSendReceipt) // no MESSAGE: the batch used up the permits
	c.send(cmdGetLastMessageID, nil, func(m msg) { m.setU64("consumer_id", 1).setU64("request_id", 5) })
	last, _ = c.expect(cmdGetLastMessageIDResponse).sub("last_message_id")
	require.Equal(t, uint64(1), last.u64("entryId"))
	require.Equal(t, int32(-1), last.i32("batch_index"))
	ledger := last.u64("ledgerId")

	// An unload moves the topic to a new, empty ledger: the last message
	// is still the one written before.
	require.NoError(t, b.UnloadTopic(topic))
	c.expect(cmdCloseProducer)
	c.expect(cmdCloseConsumer)
	c.send(cmdSubscribe, nil, func(m msg) {
		m.setStr("topic", topic).setStr("subscription", "r").setEnum("subType", subExclusive).
			setU64("consumer_id", 2).setU64("request_id", 6).setBool("durable", false)
	})
	c.expect(cmdSuccess)
	c.send(cmdGetLastMessageID, nil, func(m msg) { m.setU64("consumer_id", 2).setU64("request_id", 7) })
	last, _ = c.expect(cmdGetLastMessageIDResponse).sub("last_message_id")
	require.Equal(t, ledger, last.u64("ledgerId"))
	require.Equal(t, uint64(1), last.u64("entryId"))
	require.Equal(t, int32(-1), last.i32("batch_index"))
}

func TestRawUnsubscribe(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.connect()
	topic := "persistent://public/default/unsub"
	c.send(cmdSubscribe, nil, func(m msg) {
		m.setStr("topic", topic).setStr("subscription", "s").setEnum("subType", subExclusive).
			setU64("consumer_id", 1).setU64("request_id", 1)
	})
	c.expect(cmdSuccess)
	st, err := b.Stats(topic)
	require.NoError(t, err)
	require.Contains(t, st.Cursors, "s")
	c.send(cmdUnsubscribe, nil, func(m msg) { m.setU64("consumer_id", 1).setU64("request_id", 2) })
	c.expect(cmdSuccess)
	st, err = b.Stats(topic)
	require.NoError(t, err)
	require.NotContains(t, st.Cursors, "s")
	c.send(cmdUnsubscribe, nil, func(m msg) { m.setU64("consumer_id", 1).setU64("request_id", 3) })
	require.Equal(t, errConsumerNotFound, c.expect(cmdError).enum("error"))
}

// TestRawDeleteTopic: a forced delete closes the granted producer and the
// consumer, refuses the queued WaitForExclusive producer with
// TopicNotFound, and drops later SENDs of the closed producer. A producer
// coming back with its epoch re-creates the topic (auto-creation on) and
// is granted there with that epoch: the deleted topic's epoch is gone.
func TestRawDeleteTopic(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.connect()
	topic := "persistent://public/default/deleted"
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", topic).setU64("producer_id", 1).setU64("request_id", 1).
			setEnum("producer_access_mode", accessExclusive)
	})
	require.Equal(t, uint64(1), c.expect(cmdProducerSuccess).u64("topic_epoch"))
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", topic).setU64("producer_id", 2).setU64("request_id", 2).
			setEnum("producer_access_mode", accessWaitForExclusive)
	})
	require.False(t, c.expect(cmdProducerSuccess).boolean("producer_ready"))
	c.send(cmdSubscribe, nil, func(m msg) {
		m.setStr("topic", topic).setStr("subscription", "s").setEnum("subType", subExclusive).
			setU64("consumer_id", 1).setU64("request_id", 3)
	})
	c.expect(cmdSuccess)
	c.send(cmdSend, entryBytes("before", 0), func(m msg) { m.setU64("producer_id", 1).setU64("sequence_id", 0) })
	c.expect(cmdSendReceipt)

	require.NoError(t, b.DeleteTopic(topic))
	require.Equal(t, uint64(1), c.expect(cmdCloseProducer).u64("producer_id"))
	e := c.expect(cmdError)
	require.Equal(t, uint64(2), e.u64("request_id"))
	require.Equal(t, errTopicNotFound, e.enum("error"))
	require.Equal(t, uint64(1), c.expect(cmdCloseConsumer).u64("consumer_id"))
	_, err := b.Stats(topic)
	require.ErrorIs(t, err, ErrTopicNotFound)

	// A SEND of the closed producer is dropped: it creates nothing.
	c.send(cmdSend, entryBytes("late", 0), func(m msg) { m.setU64("producer_id", 1).setU64("sequence_id", 1) })
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", topic).setU64("producer_id", 1).setU64("request_id", 4).
			setEnum("producer_access_mode", accessExclusive).setU64("topic_epoch", 1)
	})
	require.Equal(t, uint64(1), c.expect(cmdProducerSuccess).u64("topic_epoch"), "granted on the new topic with the epoch it brought")
	st, err := b.Stats(topic)
	require.NoError(t, err)
	require.Zero(t, st.Entries)
	require.Empty(t, st.Cursors)
}
