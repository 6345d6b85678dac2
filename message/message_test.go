package message_test

import (
	stderrors "errors"
	"maps"
	"slices"
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

// Stamp sets what WithKind, WithTerm and WithTimeTick set, and leaves the
// original alone.
func TestStampMatchesTheWithMethods(t *testing.T) {
	m, err := message.New([]byte("p"), map[string]string{"user": "u"})
	require.NoError(t, err)
	for _, k := range []message.Kind{message.KindData, message.KindTimeTick, message.KindPart} {
		got := m.WithKind(message.KindTermBegin).Stamp(k, -12, 1<<40+9)
		want := m.WithKind(k).WithTerm(-12).WithTimeTick(1<<40 + 9)
		require.True(t, got.Properties().Equal(want.Properties()), "kind %s", k)
		all := got.Properties().All()
		delete(all, message.KeyKind)
		require.Equal(t, map[string]string{"user": "u", message.KeyTerm: "-12", message.KeyTimeTick: "1099511627785"}, all)
		require.Equal(t, k, got.Kind())
	}
	require.Equal(t, 1, m.Properties().Len(), "the original keeps its properties")
	// A reserved value the map kept (not canonical) gives way to the stamp.
	odd := message.Restore(nil, map[string]string{message.KeyTerm: "+3", message.KeyTimeTick: "007"})
	require.Equal(t, map[string]string{message.KeyTerm: "4", message.KeyTimeTick: "8"},
		odd.Stamp(message.KindData, 4, 8).Properties().All())
}

// Restore keeps every property as it was stored, whether the stamp or the
// map holds it, and both forms of one message are Equal.
func TestRestoreKeepsEveryValue(t *testing.T) {
	for _, props := range []map[string]string{
		{message.KeyKind: "2", message.KeyTerm: "-5", message.KeyTimeTick: "18446744073709551615", "a": "b"},
		{message.KeyKind: "02", message.KeyTerm: "+5", message.KeyTimeTick: "x"},
		{message.KeyKind: "0", message.KeyTerm: "-0", message.KeyTimeTick: "0"},
		{message.KeyKind: "256", message.KeyVChannel: "vc"},
		{},
	} {
		m := message.Restore([]byte("p"), maps.Clone(props))
		require.Equal(t, len(props), m.Properties().Len())
		if len(props) == 0 {
			require.Nil(t, m.Properties().All())
		} else {
			require.Equal(t, props, m.Properties().All())
		}
		require.Equal(t, slices.Sorted(maps.Keys(props)), m.Properties().Keys())
		for k, v := range props {
			got, ok := m.Properties().Get(k)
			require.True(t, ok)
			require.Equal(t, v, got)
		}
		user := maps.Clone(props)
		maps.DeleteFunc(user, func(k, _ string) bool { return message.IsReserved(k) })
		viaWith, err := message.New([]byte("p"), user)
		require.NoError(t, err)
		for k, v := range props {
			if !message.IsReserved(k) {
				continue
			}
			viaWith, err = viaWith.WithReserved(k, v)
			require.NoError(t, err)
		}
		require.True(t, viaWith.Properties().Equal(m.Properties()))
		require.Equal(t, m.Header(), viaWith.Header())
		size := 1
		for k, v := range props {
			size += len(k) + len(v)
		}
		require.Equal(t, size, m.Size())
	}
	a := message.Message{}.Stamp(message.KindPart, 3, 4)
	b := message.Restore(nil, map[string]string{message.KeyKind: "3", message.KeyTerm: "3", message.KeyTimeTick: "4"})
	require.True(t, a.Properties().Equal(b.Properties()))
	require.False(t, a.Properties().Equal(a.WithTimeTick(5).Properties()))
}

// A stamp's binary form carries it through a backend: DecodeStamp
// rebuilds what AppendStamp and Unstamped gave, and refuses bytes that are
// not a stamp.
func TestStampRoundTrip(t *testing.T) {
	user, err := message.New([]byte("payload"), map[string]string{"u": "v"})
	require.NoError(t, err)
	for _, m := range []message.Message{
		{},
		user,
		user.Stamp(message.KindData, 1, 2),
		user.Stamp(message.KindTermBegin, -9223372036854775808, 18446744073709551615).WithVChannel("vc"),
		message.Restore(nil, map[string]string{message.KeyTerm: "+1", message.KeyTimeTick: "9"}),
	} {
		b := append(m.AppendStamp([]byte("prefix")), "trailer"...)
		st, n, err := message.DecodeStamp(b[len("prefix"):])
		require.NoError(t, err)
		got, err := st.Restore(m.Payload(), m.Unstamped().All())
		require.NoError(t, err)
		require.Equal(t, "trailer", string(b[len("prefix")+n:]), "the stamp says where it ends")
		require.Equal(t, m.Properties().All(), got.Properties().All())
		require.Equal(t, m.Header(), got.Header())
	}
	full := message.Message{}.Stamp(message.KindPart, 300, 1<<40).AppendStamp(nil)
	for _, bad := range [][]byte{nil, {0x08}, {0xff}, full[:1], full[:2], full[:4], full[:len(full)-1]} {
		_, _, err := message.DecodeStamp(bad)
		require.ErrorIs(t, err, message.ErrBadProperty, "%x", bad)
	}
	st, _, err := message.DecodeStamp(full)
	require.NoError(t, err)
	_, err = st.Restore(nil, map[string]string{message.KeyTerm: "300"})
	require.ErrorIs(t, err, message.ErrBadProperty, "a key held twice")
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

// Size counts a stamp's values as their decimal strings, at every length.
func TestSizeOfStampedValues(t *testing.T) {
	values := []uint64{0, 1, 9, 10, 99, 100, 9999, 10000, 99999, 1 << 40, 1<<63 - 1, 1 << 63, 1<<64 - 1}
	for _, u := range values {
		for _, m := range []message.Message{
			message.Message{}.WithTimeTick(u),
			message.Message{}.WithTerm(int64(u)),
			message.Message{}.WithTerm(-int64(u)),
			message.Message{}.WithKind(message.Kind(u % 256)),
		} {
			require.Equal(t, message.Restore(nil, m.Properties().All()).Size(), m.Size())
			want := 0
			for k, v := range m.Properties().Pairs() {
				want += len(k) + len(v)
			}
			require.Equal(t, want, m.Size(), "%v", m.Properties().All())
		}
	}
}
