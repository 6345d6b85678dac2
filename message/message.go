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
	stamp   stamp // kind, term and timetick, see stamp
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
	if len(props) == 0 {
		return Message{payload: payload}, nil
	}
	return Message{payload: payload, props: maps.Clone(props)}, nil
}

// Restore rebuilds a message exactly as a backend stored it, reserved
// properties included. It is meant for backends decoding their own records;
// it takes ownership of props (and may change it).
func Restore(payload []byte, props map[string]string) Message {
	var s stamp
	props = s.absorb(props)
	return Message{payload: payload, props: props, stamp: s}
}

// Payload returns the payload. Callers must not modify it.
func (m Message) Payload() []byte { return m.payload }

// Properties returns a read-only view of every property.
func (m Message) Properties() Properties { return Properties{m: m.props, s: m.stamp} }

// Size estimates the bytes the message takes: payload plus property keys and
// values (the reserved ones in their decimal form). Backends compare it with
// their limits.
func (m Message) Size() int { return len(m.payload) + m.Properties().size() }

// Kind returns the message's kind; a message without a kind property is data.
// An undecodable kind is reported as an invalid Kind (see Kind.Valid).
func (m Message) Kind() Kind {
	if m.stamp.has&stampKind != 0 {
		return m.stamp.kind
	}
	v, ok := m.props[KeyKind]
	if !ok {
		return KindData
	}
	return parseKind(v)
}

// parseKind, parseTerm and parseTimeTick decode reserved properties that
// the map kept because they are not in canonical decimal form.
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
	if m.stamp.has&stampTerm != 0 {
		return m.stamp.term, true
	}
	v, ok := m.props[KeyTerm]
	if !ok {
		return 0, false
	}
	return parseTerm(v)
}

// TimeTick returns the message's timetick, and false when it carries none.
func (m Message) TimeTick() (uint64, bool) {
	if m.stamp.has&stampTimeTick != 0 {
		return m.stamp.tt, true
	}
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

// Header returns m's Header at once, for a reader that needs all of it
// per message.
func (m Message) Header() Header {
	h := Header{Kind: m.Kind(), Size: m.Size()}
	h.Term, h.HasTerm = m.Term()
	h.TimeTick, h.HasTimeTick = m.TimeTick()
	return h
}

// VChannel returns the virtual channel the message belongs to, or "".
func (m Message) VChannel() string { return m.props[KeyVChannel] }

// WithKind returns a copy of m with its kind set.
func (m Message) WithKind(k Kind) Message {
	m = m.without(KeyKind)
	m.stamp.has &^= stampKind
	if k != KindData {
		m.stamp.has |= stampKind
		m.stamp.kind = k
	}
	return m
}

// WithTerm returns a copy of m carrying the writer's term.
func (m Message) WithTerm(term int64) Message {
	m = m.without(KeyTerm)
	m.stamp.has |= stampTerm
	m.stamp.term = term
	return m
}

// WithTimeTick returns a copy of m carrying a timetick.
func (m Message) WithTimeTick(tt uint64) Message {
	m = m.without(KeyTimeTick)
	m.stamp.has |= stampTimeTick
	m.stamp.tt = tt
	return m
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

// Copy returns a copy of m that shares no memory with it: its payload and
// property map are copied (the stamp is a value). A backend that keeps
// messages as they are stores a Copy, since the caller may reuse a
// payload's bytes, and the map it handed Restore, once an append returned.
func (m Message) Copy() Message {
	if m.payload != nil {
		m.payload = append([]byte(nil), m.payload...)
	}
	m.props = maps.Clone(m.props)
	return m
}

// WithPayload returns a copy of m with another payload.
func (m Message) WithPayload(p []byte) Message {
	m.payload = p
	return m
}

// with sets a property; a stamp key goes to the stamp when value is in
// canonical form, to the map otherwise.
func (m Message) with(key, value string) Message {
	if f := stampFlag(key); f != 0 {
		m.stamp.has &^= f
		if m.stamp.set(f, value) {
			return m.without(key)
		}
	}
	props := make(map[string]string, len(m.props)+1)
	maps.Copy(props, m.props)
	props[key] = value
	m.props = props
	return m
}

// without drops a property from the map (not from the stamp).
func (m Message) without(key string) Message {
	if _, ok := m.props[key]; !ok {
		return m
	}
	props := maps.Clone(m.props)
	delete(props, key)
	if len(props) == 0 {
		props = nil
	}
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
// timetick set at once. The properties are not copied: the stamp is held
// beside them (unless the map held one of its keys in a non-canonical
// form, which the stamp replaces).
func (m Message) Stamp(k Kind, term int64, tt uint64) Message {
	if len(m.props) > 0 {
		for _, key := range stampKeys {
			m = m.without(key)
		}
	}
	m.stamp = stamp{has: stampTerm | stampTimeTick, term: term, tt: tt}
	if k != KindData {
		m.stamp.has |= stampKind
		m.stamp.kind = k
	}
	return m
}
