package message

import (
	"maps"
	"strconv"

	"github.com/cockroachdb/errors"
)

// Message is a message to append or one read back. The zero Message is an
// empty data message. Message values are immutable: the With* methods return
// copies, and the payload slice must not be modified after New.
type Message struct {
	payload []byte
	props   map[string]string
}

// New builds a data message from a payload and user properties. A property
// key starting with ReservedPrefix is an ErrReservedProperty error. The
// properties map is copied; the payload is not.
func New(payload []byte, props map[string]string) (Message, error) {
	for k := range props {
		if IsReserved(k) {
			return Message{}, errors.Wrapf(ErrReservedProperty, "user property %q", k)
		}
	}
	return Message{payload: payload, props: maps.Clone(props)}, nil
}

// Restore rebuilds a message exactly as a backend stored it, reserved
// properties included. It is meant for backends decoding their own records;
// it takes ownership of props.
func Restore(payload []byte, props map[string]string) Message {
	return Message{payload: payload, props: props}
}

// Payload returns the payload. Callers must not modify it.
func (m Message) Payload() []byte { return m.payload }

// Properties returns a read-only view of every property.
func (m Message) Properties() Properties { return Properties{m: m.props} }

// Size estimates the bytes the message takes: payload plus property keys and
// values. Backends compare it with their limits.
func (m Message) Size() int { return len(m.payload) + Properties{m: m.props}.size() }

// Kind returns the message's kind; a message without a kind property is data.
// An undecodable kind is reported as an invalid Kind (see Kind.Valid).
func (m Message) Kind() Kind {
	v, ok := m.props[KeyKind]
	if !ok {
		return KindData
	}
	return parseKind(v)
}

// parseKind, parseTerm and parseTimeTick decode the reserved properties,
// for the accessors and for Header alike.
func parseKind(v string) Kind {
	k, err := strconv.ParseUint(v, 10, 8)
	if err != nil {
		return kindCount
	}
	return Kind(k)
}

func parseTerm(v string) (int64, bool) {
	t, err := strconv.ParseInt(v, 10, 64)
	return t, err == nil
}

func parseTimeTick(v string) (uint64, bool) {
	t, err := strconv.ParseUint(v, 10, 64)
	return t, err == nil
}

// Term returns the writer's term, and false when the message carries none.
func (m Message) Term() (int64, bool) {
	v, ok := m.props[KeyTerm]
	if !ok {
		return 0, false
	}
	return parseTerm(v)
}

// TimeTick returns the message's timetick, and false when it carries none.
func (m Message) TimeTick() (uint64, bool) {
	v, ok := m.props[KeyTimeTick]
	if !ok {
		return 0, false
	}
	return parseTimeTick(v)
}

// Header is what a WAL reads of every message it orders: the reserved
// kind, term and timetick (as Kind, Term and TimeTick report them) and the
// message's Size.
type Header struct {
	Kind        Kind
	Term        int64
	HasTerm     bool
	TimeTick    uint64
	HasTimeTick bool
	Size        int
}

// Header returns m's Header. Kind, Term, TimeTick and Size would walk or
// look up the properties once each: on a scan, parsing these was a quarter
// of the ordering goroutine's CPU. It looks up the reserved properties a
// stored message carries and walks the map only when it holds others (a
// walk costs about twice the lookups of a message that carries only
// reserved properties).
func (m Message) Header() Header {
	h := Header{Size: len(m.payload)}
	found := 0
	if v, ok := m.props[KeyKind]; ok {
		h.Kind = parseKind(v)
		h.Size += len(KeyKind) + len(v)
		found++
	}
	if v, ok := m.props[KeyTerm]; ok {
		h.Term, h.HasTerm = parseTerm(v)
		h.Size += len(KeyTerm) + len(v)
		found++
	}
	if v, ok := m.props[KeyTimeTick]; ok {
		h.TimeTick, h.HasTimeTick = parseTimeTick(v)
		h.Size += len(KeyTimeTick) + len(v)
		found++
	}
	if v, ok := m.props[KeyVChannel]; ok {
		h.Size += len(KeyVChannel) + len(v)
		found++
	}
	if found < len(m.props) {
		h.Size = m.Size()
	}
	return h
}

// VChannel returns the virtual channel the message belongs to, or "".
func (m Message) VChannel() string { return m.props[KeyVChannel] }

// WithKind returns a copy of m with its kind set.
func (m Message) WithKind(k Kind) Message {
	if k == KindData {
		return m.without(KeyKind)
	}
	return m.with(KeyKind, strconv.FormatUint(uint64(k), 10))
}

// WithTerm returns a copy of m carrying the writer's term.
func (m Message) WithTerm(term int64) Message {
	return m.with(KeyTerm, strconv.FormatInt(term, 10))
}

// WithTimeTick returns a copy of m carrying a timetick.
func (m Message) WithTimeTick(tt uint64) Message {
	return m.with(KeyTimeTick, strconv.FormatUint(tt, 10))
}

// IdempotencyKey returns the key a client gave the message to make its
// retries idempotent, or "".
func (m Message) IdempotencyKey() string { return m.props[KeyIdempotency] }

// WithIdempotencyKey returns a copy of m carrying an idempotency key.
func (m Message) WithIdempotencyKey(key string) Message { return m.with(KeyIdempotency, key) }

// WithVChannel returns a copy of m that belongs to a virtual channel.
func (m Message) WithVChannel(vc string) Message { return m.with(KeyVChannel, vc) }

// WithReserved returns a copy of m with a reserved property set. It is an
// ErrReservedProperty error when key is not reserved, so that layers above the
// backends cannot confuse their properties with the user's.
func (m Message) WithReserved(key, value string) (Message, error) {
	if !IsReserved(key) {
		return m, errors.Wrapf(ErrReservedProperty, "key %q is not reserved", key)
	}
	return m.with(key, value), nil
}

// WithPayload returns a copy of m with another payload.
func (m Message) WithPayload(p []byte) Message {
	m.payload = p
	return m
}

func (m Message) with(key, value string) Message {
	props := make(map[string]string, len(m.props)+1)
	maps.Copy(props, m.props)
	props[key] = value
	m.props = props
	return m
}

func (m Message) without(key string) Message {
	if _, ok := m.props[key]; !ok {
		return m
	}
	props := maps.Clone(m.props)
	delete(props, key)
	m.props = props
	return m
}

// Immutable is a message read back from a WAL, with the ID it was stored at.
type Immutable struct {
	Message
	id            ID
	lastConfirmed ID
}

// NewImmutable pairs a stored message with its ID.
func NewImmutable(m Message, id ID) Immutable { return Immutable{Message: m, id: id} }

// ID returns where the message is stored.
func (m Immutable) ID() ID { return m.id }

// LastConfirmed returns the position a reader resumes from to find every
// message that follows this one, when the reader that delivered it set one
// (the zero ID otherwise). See the adaptor package.
func (m Immutable) LastConfirmed() ID { return m.lastConfirmed }

// WithLastConfirmed returns a copy of m carrying a resume position.
func (m Immutable) WithLastConfirmed(id ID) Immutable {
	m.lastConfirmed = id
	return m
}

// Stamp returns a copy of m with its kind, the writer's term and its
// timetick set at once: one copy of the properties instead of three.
func (m Message) Stamp(k Kind, term int64, tt uint64) Message {
	return NewStamper(term).Stamp(m, k, tt)
}

// Stamper stamps the messages of one writer. Its term's decimal form is
// formatted once, not per message: on the append path a string per
// property per message was a visible share of the CPU.
type Stamper struct {
	term string
}

// NewStamper returns a Stamper for a writer of term.
func NewStamper(term int64) Stamper { return Stamper{term: strconv.FormatInt(term, 10)} }

// Stamp is Message.Stamp with the Stamper's term.
func (s Stamper) Stamp(m Message, k Kind, tt uint64) Message {
	return s.StampInto(make(map[string]string, len(m.props)+3), m, k, tt)
}

// StampInto is Stamp writing the properties into props, which must be
// empty and which the returned message owns from then on. A writer that
// knows when a stamped message is no longer referenced (its backend stored
// a copy) can reuse the map for its next message instead of allocating one
// per message.
func (s Stamper) StampInto(props map[string]string, m Message, k Kind, tt uint64) Message {
	for key, v := range m.props {
		props[key] = v
	}
	if k == KindData {
		delete(props, KeyKind)
	} else {
		props[KeyKind] = strconv.FormatUint(uint64(k), 10)
	}
	props[KeyTerm] = s.term
	props[KeyTimeTick] = strconv.FormatUint(tt, 10)
	m.props = props
	return m
}
