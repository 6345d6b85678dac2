package pulsartest

import (
	"github.com/cockroachdb/errors"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	// The client registers the descriptors of its PulsarApi.proto (package
	// pulsar.proto) in the global protobuf registry when it is linked in.
	// Nothing else of the client is used by the broker.
	_ "github.com/apache/pulsar-client-go/pulsar"
)

// Fully qualified protobuf name of the command envelope.
const (
	pbPackage     = "pulsar.proto."
	pbBaseCommand = pbPackage + "BaseCommand"
)

// Command type numbers (BaseCommand.Type). In PulsarApi.proto the number of
// each type equals the field number of its sub-message in BaseCommand; schema
// checks that for every type the broker uses.
const (
	cmdConnect                     protoreflect.EnumNumber = 2
	cmdConnected                   protoreflect.EnumNumber = 3
	cmdSubscribe                   protoreflect.EnumNumber = 4
	cmdProducer                    protoreflect.EnumNumber = 5
	cmdSend                        protoreflect.EnumNumber = 6
	cmdSendReceipt                 protoreflect.EnumNumber = 7
	cmdSendError                   protoreflect.EnumNumber = 8
	cmdMessage                     protoreflect.EnumNumber = 9
	cmdAck                         protoreflect.EnumNumber = 10
	cmdFlow                        protoreflect.EnumNumber = 11
	cmdUnsubscribe                 protoreflect.EnumNumber = 12
	cmdSuccess                     protoreflect.EnumNumber = 13
	cmdError                       protoreflect.EnumNumber = 14
	cmdCloseProducer               protoreflect.EnumNumber = 15
	cmdCloseConsumer               protoreflect.EnumNumber = 16
	cmdProducerSuccess             protoreflect.EnumNumber = 17
	cmdPing                        protoreflect.EnumNumber = 18
	cmdPong                        protoreflect.EnumNumber = 19
	cmdRedeliverUnacknowledged     protoreflect.EnumNumber = 20
	cmdPartitionedMetadata         protoreflect.EnumNumber = 21
	cmdPartitionedMetadataResponse protoreflect.EnumNumber = 22
	cmdLookup                      protoreflect.EnumNumber = 23
	cmdLookupResponse              protoreflect.EnumNumber = 24
	cmdSeek                        protoreflect.EnumNumber = 28
	cmdGetLastMessageID            protoreflect.EnumNumber = 29
	cmdGetLastMessageIDResponse    protoreflect.EnumNumber = 30
	cmdAckResponse                 protoreflect.EnumNumber = 38
)

// ServerError values (enum pulsar.proto.ServerError).
const (
	errUnknown          protoreflect.EnumNumber = 0
	errPersistence      protoreflect.EnumNumber = 2
	errConsumerBusy     protoreflect.EnumNumber = 5
	errChecksumCode     protoreflect.EnumNumber = 9
	errTopicNotFound    protoreflect.EnumNumber = 11
	errConsumerNotFound protoreflect.EnumNumber = 13
	errProducerBusy     protoreflect.EnumNumber = 16
	errNotAllowed       protoreflect.EnumNumber = 22
	errProducerFenced   protoreflect.EnumNumber = 25
)

// Other enum values used on the wire.
const (
	accessShared           protoreflect.EnumNumber = 0 // ProducerAccessMode
	accessExclusive        protoreflect.EnumNumber = 1
	accessWaitForExclusive protoreflect.EnumNumber = 2

	subExclusive protoreflect.EnumNumber = 0 // CommandSubscribe.SubType

	initialEarliest protoreflect.EnumNumber = 1 // CommandSubscribe.InitialPosition (Latest = 0)

	ackCumulative protoreflect.EnumNumber = 1 // CommandAck.AckType (Individual = 0)

	metadataSuccess protoreflect.EnumNumber = 0 // partitioned metadata LookupType
	lookupConnect   protoreflect.EnumNumber = 1 // lookup LookupType
)

// Field numbers of MessageMetadata read straight from the wire with protowire.
const metadataNumMessagesInBatch = 11

// schema resolves the Pulsar protocol messages from the global protobuf
// registry. It is built once per broker and read-only afterwards.
type schema struct {
	base      protoreflect.MessageType
	typeField protoreflect.FieldDescriptor
	marshal   proto.MarshalOptions
	unmarshal proto.UnmarshalOptions
}

// newSchema looks the protocol up in the global registry. It prefers the
// message types the client registered (fast generated code driven through
// protoreflect) and falls back to dynamicpb over the file descriptor.
func newSchema() (*schema, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(pbBaseCommand)
	if err != nil {
		d, derr := protoregistry.GlobalFiles.FindDescriptorByName(pbBaseCommand)
		if derr != nil {
			return nil, errors.Wrapf(derr, "pulsar protocol descriptor %s not registered", pbBaseCommand)
		}
		md, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			return nil, errors.Newf("%s is not a message", pbBaseCommand)
		}
		mt = dynamicpb.NewMessageType(md)
	}
	s := &schema{
		base:      mt,
		typeField: mt.Descriptor().Fields().ByName("type"),
		unmarshal: proto.UnmarshalOptions{DiscardUnknown: true},
	}
	if s.typeField == nil || s.typeField.Enum() == nil {
		return nil, errors.New("BaseCommand has no enum field type")
	}
	for _, n := range []protoreflect.EnumNumber{
		cmdConnect, cmdConnected, cmdSubscribe, cmdProducer, cmdSend, cmdSendReceipt, cmdSendError,
		cmdMessage, cmdAck, cmdFlow, cmdUnsubscribe, cmdSuccess, cmdError, cmdCloseProducer,
		cmdCloseConsumer, cmdProducerSuccess, cmdPing, cmdPong, cmdRedeliverUnacknowledged,
		cmdPartitionedMetadata, cmdPartitionedMetadataResponse, cmdLookup, cmdLookupResponse,
		cmdSeek, cmdGetLastMessageID, cmdGetLastMessageIDResponse, cmdAckResponse,
	} {
		if s.typeField.Enum().Values().ByNumber(n) == nil {
			return nil, errors.Newf("BaseCommand.Type has no value %d", n)
		}
		if s.sub(n) == nil {
			return nil, errors.Newf("BaseCommand has no message field %d", n)
		}
	}
	return s, nil
}

// sub returns BaseCommand's sub-message field for command type n, or nil.
func (s *schema) sub(n protoreflect.EnumNumber) protoreflect.FieldDescriptor {
	fd := s.base.Descriptor().Fields().ByNumber(protoreflect.FieldNumber(n))
	if fd == nil || fd.Message() == nil {
		return nil
	}
	return fd
}

// typeName names a command type for logs.
func (s *schema) typeName(n protoreflect.EnumNumber) string {
	if v := s.typeField.Enum().Values().ByNumber(n); v != nil {
		return string(v.Name())
	}
	return "UNKNOWN"
}

// command is a decoded BaseCommand: its type and its sub-message (which may be
// nil for an unknown type).
type command struct {
	typ  protoreflect.EnumNumber
	body protoreflect.Message
}

// decode parses a BaseCommand.
func (s *schema) decode(b []byte) (command, error) {
	m := s.base.New()
	if err := s.unmarshal.Unmarshal(b, m.Interface()); err != nil {
		return command{}, errors.Wrap(err, "decode command")
	}
	typ := m.Get(s.typeField).Enum()
	c := command{typ: typ}
	if fd := s.sub(typ); fd != nil && m.Has(fd) {
		c.body = m.Get(fd).Message()
	}
	return c, nil
}

// newCommand returns a BaseCommand of type typ and its (mutable) sub-message.
func (s *schema) newCommand(typ protoreflect.EnumNumber) (protoreflect.Message, msg) {
	m := s.base.New()
	m.Set(s.typeField, protoreflect.ValueOfEnum(typ))
	return m, msg{m.Mutable(s.sub(typ)).Message()}
}

// encode marshals a BaseCommand, checking required fields.
func (s *schema) encode(m protoreflect.Message) ([]byte, error) {
	b, err := s.marshal.Marshal(m.Interface())
	return b, errors.Wrap(err, "encode command")
}

// msg wraps a protoreflect.Message with accessors by field name. A name that
// does not exist is a programming error and panics (tests cover every use).
type msg struct{ m protoreflect.Message }

func (x msg) field(name string) protoreflect.FieldDescriptor {
	fd := x.m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		panic("pulsartest: no field " + name + " in " + string(x.m.Descriptor().FullName()))
	}
	return fd
}

func (x msg) has(name string) bool { return x.m.Has(x.field(name)) }

func (x msg) u64(name string) uint64 { return x.m.Get(x.field(name)).Uint() }

func (x msg) i32(name string) int32 { return int32(x.m.Get(x.field(name)).Int()) }

func (x msg) str(name string) string { return x.m.Get(x.field(name)).String() }

func (x msg) boolean(name string) bool { return x.m.Get(x.field(name)).Bool() }

func (x msg) enum(name string) protoreflect.EnumNumber { return x.m.Get(x.field(name)).Enum() }

// sub returns a set sub-message, ok false when it is not set.
func (x msg) sub(name string) (msg, bool) {
	fd := x.field(name)
	if !x.m.Has(fd) {
		return msg{}, false
	}
	return msg{x.m.Get(fd).Message()}, true
}

// list returns the elements of a repeated message field.
func (x msg) list(name string) []msg {
	l := x.m.Get(x.field(name)).List()
	out := make([]msg, l.Len())
	for i := range out {
		out[i] = msg{l.Get(i).Message()}
	}
	return out
}

// count returns the length of a repeated field.
func (x msg) count(name string) int { return x.m.Get(x.field(name)).List().Len() }

// mutable returns a sub-message field for filling in.
func (x msg) mutable(name string) msg { return msg{x.m.Mutable(x.field(name)).Message()} }

func (x msg) setU64(name string, v uint64) msg {
	x.m.Set(x.field(name), protoreflect.ValueOfUint64(v))
	return x
}

func (x msg) setU32(name string, v uint32) msg {
	x.m.Set(x.field(name), protoreflect.ValueOfUint32(v))
	return x
}

func (x msg) setI32(name string, v int32) msg {
	x.m.Set(x.field(name), protoreflect.ValueOfInt32(v))
	return x
}

func (x msg) setI64(name string, v int64) msg {
	x.m.Set(x.field(name), protoreflect.ValueOfInt64(v))
	return x
}

func (x msg) setStr(name, v string) msg {
	x.m.Set(x.field(name), protoreflect.ValueOfString(v))
	return x
}

func (x msg) setBool(name string, v bool) msg {
	x.m.Set(x.field(name), protoreflect.ValueOfBool(v))
	return x
}

func (x msg) setEnum(name string, v protoreflect.EnumNumber) msg {
	x.m.Set(x.field(name), protoreflect.ValueOfEnum(v))
	return x
}
