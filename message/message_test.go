package message_test

import (
	stderrors "errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
)

func TestNewRejectsReservedKeys(t *testing.T) {
	_, err := message.New([]byte("x"), map[string]string{"ok": "1", "_t": "5"})
	require.ErrorIs(t, err, message.ErrReservedProperty)
	require.Contains(t, err.Error(), `"_t"`)

	props := map[string]string{"a": "1"}
	m, err := message.New([]byte("x"), props)
	require.NoError(t, err)
	props["a"] = "changed"
	v, _ := m.Properties().Get("a")
	require.Equal(t, "1", v, "New copies the properties")
}

func TestReservedAccessors(t *testing.T) {
	m, err := message.New([]byte("p"), map[string]string{"user": "u"})
	require.NoError(t, err)
	require.Equal(t, message.KindData, m.Kind())
	_, ok := m.Term()
	require.False(t, ok)

	m2 := m.WithTerm(7).WithTimeTick(1<<40 + 3).WithVChannel("vc1").WithKind(message.KindTermBegin)
	term, ok := m2.Term()
	require.True(t, ok)
	require.EqualValues(t, 7, term)
	tt, ok := m2.TimeTick()
	require.True(t, ok)
	require.EqualValues(t, 1<<40+3, tt)
	require.Equal(t, "vc1", m2.VChannel())
	require.Equal(t, message.KindTermBegin, m2.Kind())
	require.Equal(t, "term-begin", m2.Kind().String())
	require.Equal(t, map[string]string{"user": "u"}, m2.Properties().User())

	// The original is untouched: With* returns copies.
	require.Equal(t, 1, m.Properties().Len())
	require.Equal(t, message.KindData, m2.WithKind(message.KindData).Kind())

	_, err = m.WithReserved("plain", "x")
	require.ErrorIs(t, err, message.ErrReservedProperty)
	m3, err := m.WithReserved(message.KeyPartHeader, "1/3")
	require.NoError(t, err)
	v, _ := m3.Properties().Get(message.KeyPartHeader)
	require.Equal(t, "1/3", v)

	bad := message.Restore(nil, map[string]string{message.KeyKind: "zz", message.KeyTerm: "x"})
	require.False(t, bad.Kind().Valid())
	_, ok = bad.Term()
	require.False(t, ok)
	require.Equal(t, "kind(200)", message.Kind(200).String())
}

func TestSize(t *testing.T) {
	m, err := message.New([]byte("12345"), map[string]string{"ab": "cd"})
	require.NoError(t, err)
	require.Equal(t, 9, m.Size())
	require.Equal(t, 0, message.Message{}.Size())
}

func TestSeqID(t *testing.T) {
	a, b := message.NewSeqID("x", 1), message.NewSeqID("x", 2)
	require.True(t, a.LT(b))
	require.True(t, a.LTE(b))
	require.True(t, a.LTE(a))
	require.True(t, a.EQ(message.NewSeqID("x", 1)))
	require.False(t, b.LT(a))

	other := message.NewSeqID("y", 1)
	_, err := a.Compare(other)
	require.ErrorIs(t, err, message.ErrIncomparableID)
	require.False(t, a.LT(other))
	require.False(t, a.EQ(other))
	_, err = a.Compare(message.ID{})
	require.ErrorIs(t, err, message.ErrIncomparableID)
	require.Equal(t, "<none>", message.ID{}.String())
	require.Equal(t, "x:1", a.String())

	for _, s := range []string{"0", "7", "9223372036854775807"} {
		id, err := message.UnmarshalSeqID("x", s)
		require.NoError(t, err)
		require.Equal(t, s, id.Marshal())
	}
	for _, s := range []string{"", "-1", "+1", "01", " 1", "1a", "9223372036854775808", "99999999999999999999"} {
		_, err := message.UnmarshalSeqID("x", s)
		require.ErrorIsf(t, err, message.ErrCorruptID, "%q", s)
	}
	seq, err := message.SeqOf("x", b)
	require.NoError(t, err)
	require.EqualValues(t, 2, seq)
	_, err = message.SeqOf("y", b)
	require.ErrorIs(t, err, message.ErrIncomparableID)
	_, err = message.SeqOf("y", message.ID{})
	require.ErrorIs(t, err, message.ErrIncomparableID)
}

// TestCorruptIDKeepsItsCause: both the sentinel and the parser's error are
// found by the standard library's errors.Is, and the message says each once.
func TestCorruptIDKeepsItsCause(t *testing.T) {
	_, err := message.UnmarshalSeqID("memory", "9999999999999999999")
	require.True(t, stderrors.Is(err, message.ErrCorruptID))
	require.True(t, stderrors.Is(err, strconv.ErrRange))
	require.Equal(t, `memory id "9999999999999999999": strconv.ParseInt: parsing "9999999999999999999": value out of range: `+message.ErrCorruptID.Error(), err.Error())
}

// A Stamper stamps exactly what Message.Stamp does, and leaves the
// original's properties alone.
func TestStamperMatchesStamp(t *testing.T) {
	m, err := message.New([]byte("p"), map[string]string{"user": "u"})
	require.NoError(t, err)
	s := message.NewStamper(-12)
	for _, k := range []message.Kind{message.KindData, message.KindTimeTick, message.KindPart} {
		got := s.Stamp(m.WithKind(message.KindTermBegin), k, 1<<40+9)
		want := m.WithKind(message.KindTermBegin).Stamp(k, -12, 1<<40+9)
		require.True(t, got.Properties().Equal(want.Properties()), "kind %s", k)
		require.Equal(t, k, got.Kind())
		term, _ := got.Term()
		require.EqualValues(t, -12, term)
		tt, _ := got.TimeTick()
		require.EqualValues(t, 1<<40+9, tt)
	}
	require.Equal(t, 1, m.Properties().Len(), "the original keeps its properties")

	props := map[string]string{}
	into := s.StampInto(props, m, message.KindData, 5)
	require.True(t, into.Properties().Equal(m.Stamp(message.KindData, -12, 5).Properties()))
	require.Len(t, props, 3, "the message's properties are the map given")
}

// Header reports exactly what Kind, Term, TimeTick and Size do, whatever
// the reserved properties hold.
func TestHeaderMatchesTheAccessors(t *testing.T) {
	values := []string{"", "0", "7", "255", "256", "-1", "+3", "1_0", "x", " 1",
		"18446744073709551615", "18446744073709551616", "99999999999999999999",
		"9223372036854775807", "-9223372036854775808", "9223372036854775808", "001"}
	check := func(m message.Message) {
		t.Helper()
		h := m.Header()
		require.Equal(t, m.Kind(), h.Kind, "kind of %v", m.Properties().All())
		term, ok := m.Term()
		require.Equal(t, ok, h.HasTerm)
		if ok {
			require.Equal(t, term, h.Term)
		}
		tt, ok := m.TimeTick()
		require.Equal(t, ok, h.HasTimeTick, "timetick of %v", m.Properties().All())
		if ok {
			require.Equal(t, tt, h.TimeTick)
		}
		require.Equal(t, m.Size(), h.Size)
	}
	check(message.Message{})
	base, err := message.New([]byte("payload"), map[string]string{"user": "u"})
	require.NoError(t, err)
	check(base)
	for _, key := range []string{message.KeyKind, message.KeyTerm, message.KeyTimeTick} {
		for _, v := range values {
			m, err := base.WithReserved(key, v)
			require.NoError(t, err)
			check(m)
		}
	}
	check(base.Stamp(message.KindPart, 3, 1<<62))
}
