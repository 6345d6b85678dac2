package kafka

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func TestAppendRead(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	o := newOpener(t, testConfig(c))
	w := open(t, o, "basic", 1, walimpls.ReadWrite)
	assert.Equal(t, "kafka", w.WALName())
	assert.Equal(t, walimpls.Channel{Name: "basic", Term: 1}, w.Channel())

	bin := []byte{0, 1, 2, 0xff, 0xfe}
	ms := []message.Message{
		msg(t, "hello", map[string]string{"k": "v", "unicode": "héllo ☃"}),
		msg(t, "", nil),
		message.Restore(bin, map[string]string{"empty": ""}),
		msg(t, "typed", nil).WithTerm(1).WithTimeTick(42).WithKind(message.KindTimeTick).WithVChannel("vc"),
	}
	var ids []message.ID
	for _, m := range ms {
		ids = append(ids, appendOK(t, w, m))
	}
	for i := 1; i < len(ids); i++ {
		assert.True(t, ids[i-1].LT(ids[i]), "%s < %s", ids[i-1], ids[i])
	}
	got := readN(t, w, cursor.All(), len(ms))
	for i, m := range got {
		assert.True(t, ids[i].EQ(m.ID()), "id %d: %s vs %s", i, ids[i], m.ID())
		assert.True(t, bytes.Equal(ms[i].Payload(), m.Payload()), "payload %d", i)
		assert.True(t, ms[i].Properties().Equal(m.Properties()), "props %d: %v vs %v", i, ms[i].Properties().All(), m.Properties().All())
		back, err := o.UnmarshalID(m.ID().Marshal())
		require.NoError(t, err)
		assert.True(t, back.EQ(m.ID()))
	}
	got = readN(t, w, cursor.StartAfter(ids[1]), 2)
	assert.True(t, got[0].ID().EQ(ids[2]))
	got = readN(t, w, cursor.StartFrom(ids[1]), 3)
	assert.True(t, got[0].ID().EQ(ids[1]))

	// Latest: only later appends.
	ctx := context.Background()
	s, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	defer s.Close()
	later := appendOK(t, w, msg(t, "later", nil))
	m := collect(t, s, 1, 5*time.Second)[0]
	assert.True(t, later.EQ(m.ID()))
	assert.Equal(t, "later", string(m.Payload()))
	require.NoError(t, s.Close())
	<-s.Done()
	assert.NoError(t, s.Error())
	_, ok := <-s.Chan()
	assert.False(t, ok)
}

func TestConcurrentAppends(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	o := newOpener(t, testConfig(c))
	w := open(t, o, "conc", 1, walimpls.ReadWrite)
	const workers, per = 16, 50
	var mu sync.Mutex
	ids := map[int64]string{}
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64 = -1
			for i := range per {
				p := fmt.Sprintf("%d-%d", g, i)
				id, err := walimpls.Append(context.Background(), w, msg(t, p, nil))
				if !assert.NoError(t, err) {
					return
				}
				s := seq(t, id)
				assert.Greater(t, s, last)
				last = s
				mu.Lock()
				ids[s] = p
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, ids, workers*per)
	got := readN(t, w, cursor.All(), workers*per)
	for _, m := range got {
		assert.Equal(t, ids[seq(t, m.ID())], string(m.Payload()))
	}
}

func TestFencing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := testConfig(c)
	a := newOpener(t, cfg)
	b := newOpener(t, cfg)
	wa := open(t, a, "fence", 1, walimpls.ReadWrite)
	appendOK(t, wa, msg(t, "a1", nil))
	wb := open(t, b, "fence", 2, walimpls.ReadWrite)
	_, err := walimpls.Append(context.Background(), wa, msg(t, "a2", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	var fe *walimpls.FencedError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, int64(2), fe.CurrentTerm)
	_, err = walimpls.Append(context.Background(), wa, msg(t, "a3", nil))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	appendOK(t, wb, msg(t, "b1", nil))

	// A lower term cannot open, and does not disturb the owner.
	_, err = a.Open(context.Background(), walimpls.Channel{Name: "fence", Term: 1})
	require.ErrorIs(t, err, walimpls.ErrFenced)
	appendOK(t, wb, msg(t, "b2", nil))
	got := readN(t, wb, cursor.All(), 3)
	assert.Equal(t, []string{"a1", "b1", "b2"}, payloads(got))

	// Same term reopen after close is allowed.
	require.NoError(t, wb.Close())
	wb2 := open(t, b, "fence", 2, walimpls.ReadWrite)
	appendOK(t, wb2, msg(t, "b3", nil))
}

func payloads(ms []message.Immutable) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload())
	}
	return out
}
