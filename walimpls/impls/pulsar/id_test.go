package pulsar

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
)

func TestIDOrderAndMarshal(t *testing.T) {
	ordered := []msgID{
		{ledger: 1, entry: 0, batch: -1},
		{ledger: 1, entry: 0, batch: 0},
		{ledger: 1, entry: 0, batch: 1},
		{ledger: 1, entry: 0, batch: 1, partition: 3},
		{ledger: 1, entry: 1, batch: -1},
		{ledger: 1, entry: 10, batch: 2},
		{ledger: 2, entry: 0, batch: -1},
		{ledger: 1 << 40, entry: 1 << 50, batch: 1 << 30},
	}
	for i, a := range ordered {
		for j, b := range ordered {
			c, err := message.NewID(a).Compare(message.NewID(b))
			require.NoError(t, err)
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			require.Equalf(t, want, c, "%s vs %s", a, b)
		}
		s := a.Marshal()
		back, err := unmarshalID(s)
		require.NoError(t, err, s)
		require.True(t, back.EQ(message.NewID(a)), s)
		require.Equal(t, s, back.Marshal())
	}
	assert.Equal(t, "42:7", msgID{ledger: 42, entry: 7, batch: -1}.Marshal())
	assert.Equal(t, "42:7:3@1", msgID{ledger: 42, entry: 7, batch: 3, partition: 1}.Marshal())
	// The batch size is neither compared nor marshalled.
	a, b := msgID{ledger: 1, entry: 2, batch: 0, batchSize: 4}, msgID{ledger: 1, entry: 2, batch: 0}
	assert.Equal(t, 0, a.compare(b))
	assert.Equal(t, a.Marshal(), b.Marshal())
}

func TestIDCorrupt(t *testing.T) {
	for _, s := range []string{"", "1", "1:", ":1", "1:2:3:4", "-1:2", "1:-2", "01:2", "1:02", "1:2:03",
		"1:2@0", "1:2@", "1:2@-1", "1:2:2147483648", "9223372036854775808:1", "a:b", " 1:2", "1:2 ",
		"not-an-id", "\x00\xff\xfe", "%%%", "12ab!", "1:2@1@1"} {
		_, err := unmarshalID(s)
		require.ErrorIsf(t, err, message.ErrCorruptID, "%q", s)
	}
}

// TestIDCorruptKeepsTheCause: a position that does not parse is
// message.ErrCorruptID and keeps the parser's error as a cause too.
func TestIDCorruptKeepsTheCause(t *testing.T) {
	_, err := unmarshalID("9223372036854775808:1")
	require.ErrorIs(t, err, message.ErrCorruptID)
	require.ErrorIs(t, err, strconv.ErrRange)
	require.EqualError(t, err, `pulsar id "9223372036854775808:1": ledger: strconv.ParseUint: parsing "9223372036854775808": value out of range: `+message.ErrCorruptID.Error())
}

func TestFollows(t *testing.T) {
	id := func(l, e int64, b, size int32) msgID { return msgID{ledger: l, entry: e, batch: b, batchSize: size} }
	for _, c := range []struct {
		prev, next msgID
		want       bool
	}{
		{id(1, 0, -1, 0), id(1, 1, -1, 0), true},
		{id(1, 0, -1, 0), id(1, 2, -1, 0), false}, // an entry skipped
		{id(1, 0, 0, 3), id(1, 0, 1, 3), true},    // next in the batch
		{id(1, 0, 0, 3), id(1, 1, 0, 1), false},   // rest of the batch skipped
		{id(1, 0, 2, 3), id(1, 1, 0, 1), true},    // batch done
		{id(1, 0, 0, 0), id(1, 1, 0, 1), true},    // size unknown: next entry
		{id(1, 0, 0, 0), id(1, 0, 1, 1), true},    // size unknown: next index
		{id(1, 5, -1, 0), id(2, 0, -1, 0), true},  // new ledger
		{id(1, 5, -1, 0), id(2, 1, -1, 0), false}, // first entry of a new ledger skipped
		{id(1, 5, -1, 0), id(1, 6, 1, 2), false},  // first message of a batch skipped
		{id(1, -1, -1, 0), id(1, 0, 0, 2), true},  // an empty topic's last id
		{id(2, 5, -1, 0), id(1, 6, -1, 0), false}, // older ledger
		{id(1, 4, 0, 1), id(1, 5, 0, 5), true},
	} {
		assert.Equalf(t, c.want, follows(c.prev, c.next), "%v then %v", c.prev, c.next)
	}
}

func TestScannerExpected(t *testing.T) {
	s := &scanner{start: start{earliest: true}}
	assert.True(t, s.expected(msgID{ledger: 3, entry: 0, batch: 0}))
	assert.False(t, s.expected(msgID{ledger: 3, entry: 1, batch: 0}), "the first entry of the topic was skipped, or trimmed")
	s.suspect, s.hasSuspect = msgID{ledger: 3, entry: 1, batch: 0}, true
	assert.True(t, s.expected(msgID{ledger: 3, entry: 1, batch: 0}), "a fresh reader confirmed it")

	s = &scanner{start: start{id: msgID{ledger: 3, entry: 4, batch: -1}, inclusive: true}}
	assert.True(t, s.expected(msgID{ledger: 3, entry: 4, batch: -1}))
	assert.False(t, s.expected(msgID{ledger: 3, entry: 5, batch: -1}))

	s = &scanner{start: start{id: msgID{ledger: 3, entry: 4, batch: -1}}}
	assert.True(t, s.expected(msgID{ledger: 3, entry: 5, batch: -1}))
	assert.False(t, s.expected(msgID{ledger: 3, entry: 6, batch: -1}))

	s.last, s.hasLast = msgID{ledger: 3, entry: 9, batch: 1, batchSize: 2}, true
	assert.True(t, s.expected(msgID{ledger: 3, entry: 10, batch: 0}))
	assert.False(t, s.expected(msgID{ledger: 3, entry: 11, batch: 0}))
}
