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

func TestRawChecksumMismatch(t *testing.T) {
	b := Start(t, Config{})
	c := dialRaw(t, b)
	c.connect()
	c.send(cmdProducer, nil, func(m msg) {
		m.setStr("topic", "persistent://public/default/raw").setU64("producer_id", 1).setU64("request_id", 1)
	})
	ok := c.expect(cmdProducerSuccess)
	require.NotEmpty(t, ok.str("producer_name"))

	good := entryBytes("hello", 0)
	c.send(cmdSend, good, func(m msg) { m.setU64("producer_id", 1).setU64("sequence_id", 0) })
	rc := c.expect(cmdSendReceipt)
	require.Equal(t, uint64(0), rc.u64("sequence_id"))

	bad := entryBytes("hello", 0)
	bad[len(bad)-1] ^= 0xff
	c.send(cmdSend, bad, func(m msg) { m.setU64("producer_id", 1).setU64("sequence_id", 1) })
	se := c.expect(cmdSendError)
	require.Equal(t, errChecksumCode, se.enum("error"))
	require.Equal(t, uint64(1), se.u64("sequence_id"))

	st, err := b.Stats("raw")
	require.NoError(t, err)
	require.Equal(t, 1, st.Entries)
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
