package walimplstest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

const (
	appenders          = 8
	messagesPerWriter  = 40
	unicodeValue       = "héllo, 世界 🚀 — ünïcödé"
	largeMessageWriter = 2 // writers below this append one large message each
)

// writerMessages returns writer g's messages: an empty one, binary ones,
// unicode property values, reserved properties set by the layers above, and
// for the first writers one large message.
func (e *env) writerMessages(t *testing.T, g int) []message.Message {
	r := rand.New(rand.NewPCG(uint64(g), 42))
	msgs := make([]message.Message, messagesPerWriter)
	for i := range msgs {
		props := map[string]string{"writer": strconv.Itoa(g), "i": strconv.Itoa(i), "unicode": unicodeValue, "empty": ""}
		var payload []byte
		switch {
		case i == 0:
			payload = nil
		case i == 5 && g < largeMessageWriter:
			payload = randomBytes(r, e.largePayloadSize())
		default:
			payload = randomBytes(r, 1+r.IntN(2048))
		}
		m := mustMessage(t, payload, props)
		if i%7 == 3 {
			m = m.WithTerm(int64(g)).WithTimeTick(uint64(i)<<20 | 7).WithVChannel("vc-" + strconv.Itoa(g)).WithKind(message.KindTimeTick)
		}
		msgs[i] = m
	}
	return msgs
}

func testConcurrentAppendRead(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("concurrent"), 1, walimpls.ReadWrite)
	before := []walimpls.Scanner{e.read(w, walimpls.DeliverAll()), e.read(w, walimpls.DeliverAll())}

	var (
		mu    sync.Mutex
		acked = map[string]message.Message{} // marshalled id → message
		wg    sync.WaitGroup
		errs  = make(chan error, appenders)
	)
	for g := range appenders {
		msgs := e.writerMessages(t, g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last message.ID
			for i, m := range msgs {
				id, err := w.Append(e.ctx, m)
				if err != nil {
					errs <- fmt.Errorf("writer %d append %d: %w", g, i, err)
					return
				}
				if !last.IsZero() && !last.LT(id) {
					errs <- fmt.Errorf("writer %d: id %s after %s does not increase", g, id, last)
					return
				}
				last = id
				mu.Lock()
				if _, dup := acked[id.Marshal()]; dup {
					mu.Unlock()
					errs <- fmt.Errorf("writer %d: id %s returned twice", g, id)
					return
				}
				acked[id.Marshal()] = m
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, acked, appenders*messagesPerWriter)

	after := e.read(w, walimpls.DeliverAll())
	for ri, s := range append(before, after) {
		got := e.recv(s, len(acked))
		seen := map[string]bool{}
		for i, m := range got {
			key := m.ID().Marshal()
			want, ok := acked[key]
			require.Truef(t, ok, "reader %d delivered %s which was never acknowledged", ri, m.ID())
			require.Falsef(t, seen[key], "reader %d delivered %s twice", ri, m.ID())
			seen[key] = true
			sameMessage(t, want, m.Message, fmt.Sprintf("reader %d message %s", ri, m.ID()))
			if i > 0 {
				require.Truef(t, got[i-1].ID().LT(m.ID()), "reader %d: %s delivered after %s", ri, m.ID(), got[i-1].ID())
			}
		}
		e.quiet(s)
	}
}

func testIDOrder(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("ids")
	msgs := simpleMessages(t, "ids", 40)
	w := e.open(o, name, 1, walimpls.ReadWrite)
	ids := e.appendAll(w, msgs[:20])
	require.NoError(t, w.Close())
	w = e.open(o, name, 2, walimpls.ReadWrite)
	ids = append(ids, e.appendAll(w, msgs[20:])...)

	for i := range ids {
		for j := range ids {
			a, b := ids[i], ids[j]
			c, err := a.Compare(b)
			require.NoError(t, err)
			require.Equalf(t, i < j, a.LT(b), "%s.LT(%s)", a, b)
			require.Equalf(t, i <= j, a.LTE(b), "%s.LTE(%s)", a, b)
			require.Equalf(t, i == j, a.EQ(b), "%s.EQ(%s)", a, b)
			require.Equalf(t, a.LT(b), c < 0, "Compare agrees with LT for %s, %s", a, b)
		}
	}

	marshalled := map[string]bool{}
	for _, id := range ids {
		s := id.Marshal()
		require.NotEmpty(t, s)
		require.Falsef(t, marshalled[s], "two ids marshal to %q", s)
		marshalled[s] = true
		back, err := o.UnmarshalID(s)
		require.NoErrorf(t, err, "unmarshal %q", s)
		require.Truef(t, back.EQ(id), "%q round-trips to %s, want %s", s, back, id)
		require.Equal(t, s, back.Marshal())
	}
	for _, corrupt := range []string{"", "not-an-id", "\x00\xff\xfe", "%%%", "12ab!", " 1"} {
		_, err := o.UnmarshalID(corrupt)
		require.ErrorIsf(t, err, message.ErrCorruptID, "unmarshal %q", corrupt)
	}

	// The order read back is the order of the IDs.
	checkSequence(t, ids, msgs, e.recv(e.read(w, walimpls.DeliverAll()), len(ids)))
}

func testDeliverPolicies(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("policies"), 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "pol", 13)
	ids := e.appendAll(w, msgs[:10])

	all := e.recv(e.read(w, walimpls.DeliverAll()), 10)
	checkSequence(t, ids, msgs[:10], all)
	first := e.read(w, walimpls.DeliverStartFrom(ids[0]))
	checkSequence(t, ids, msgs[:10], e.recv(first, 10))
	e.quiet(first)

	from := e.read(w, walimpls.DeliverStartFrom(ids[5]))
	checkSequence(t, ids[5:], msgs[5:10], e.recv(from, 5))
	e.quiet(from)
	after := e.read(w, walimpls.DeliverStartAfter(ids[5]))
	checkSequence(t, ids[6:], msgs[6:10], e.recv(after, 4))
	e.quiet(after)
	last := e.read(w, walimpls.DeliverStartAfter(ids[9]))

	latest := e.read(w, walimpls.DeliverLatest())
	e.quiet(latest)
	ids = append(ids, e.appendAll(w, msgs[10:])...)
	checkSequence(t, ids[10:], msgs[10:], e.recv(latest, 3))
	e.quiet(latest)
	checkSequence(t, ids[10:], msgs[10:], e.recv(last, 3))
}

func testParallelChannels(t *testing.T, e *env) {
	o := e.opener()
	const n = 60
	names := []string{channelName("par-a"), channelName("par-b"), channelName("par-c")}
	wals := make([]walimpls.WALImpl, len(names))
	for i, name := range names {
		wals[i] = e.open(o, name, 1, walimpls.ReadWrite)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	ids := make([][]message.ID, len(names))
	msgs := make([][]message.Message, len(names))
	for i, name := range names {
		msgs[i] = simpleMessages(t, name, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, m := range msgs[i] {
				id, err := wals[i].Append(e.ctx, m)
				if err != nil {
					errs <- fmt.Errorf("channel %s append %d: %w", name, j, err)
					return
				}
				ids[i] = append(ids[i], id)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range names {
		s := e.read(wals[i], walimpls.DeliverAll())
		checkSequence(t, ids[i], msgs[i], e.recv(s, n))
		e.quiet(s)
	}
}
