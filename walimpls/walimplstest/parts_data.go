package walimplstest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

const (
	appenders          = 8
	messagesPerWriter  = 1000
	variedMessages     = 40 // the first messages of each writer vary in shape and size
	unicodeValue       = "héllo, 世界 🚀 — ünïcödé"
	largeMessageWriter = 2 // writers below this append one large message each
)

// A stamp holds a term (int64) and a timetick (uint64), and a backend
// must keep every bit of both. Real timeticks are hybrid logical clocks
// (physical milliseconds << 18 | logical), above 2^58 today, and terms are
// whatever int64 holds: the parts that round-trip stamps take them from
// these tables, the edges of both types, so that a backend keeping fewer
// bits (a 32-bit field, a float64, a signed timetick) fails them.
var (
	edgeTerms = []int64{
		0, 1, math.MaxInt32, math.MaxInt32 + 1, math.MaxUint32, math.MaxUint32 + 1,
		1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64,
		-1, math.MinInt32, math.MinInt32 - 1, -1 << 32, math.MinInt64,
	}
	edgeTimeTicks = []uint64{
		0, 1, math.MaxUint32, math.MaxUint32 + 1,
		1_767_225_600_000<<18 | 3, // 2026-01-01 as a hybrid timetick
		1<<53 + 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64,
	}
)

// edgeStamp returns the k-th term and timetick of the edge tables: any
// len(edgeTerms) consecutive k give every term, any len(edgeTimeTicks)
// every timetick.
func edgeStamp(k int) (int64, uint64) {
	return edgeTerms[k%len(edgeTerms)], edgeTimeTicks[k%len(edgeTimeTicks)]
}

// writerMessages returns writer g's messages: an empty one, binary ones,
// unicode property values, reserved properties set by the layers above
// (stamps among them, at the edges of their types), for the first writers
// one large message, then many small ones.
func (e *env) writerMessages(t *testing.T, g int) []message.Message {
	r := rand.New(rand.NewPCG(uint64(g), 42))
	msgs := make([]message.Message, messagesPerWriter)
	for i := range msgs {
		if i >= variedMessages {
			msgs[i] = mustMessage(t, randomBytes(r, 1+r.IntN(256)), map[string]string{"writer": strconv.Itoa(g), "i": strconv.Itoa(i)})
			continue
		}
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
			// Every edge term and every edge timetick, across writers.
			term, tt := edgeStamp(i/7*appenders + g)
			m = m.WithTerm(term).WithTimeTick(tt).WithVChannel("vc-" + strconv.Itoa(g)).WithKind(message.KindTimeTick)
		}
		if i%11 == 4 {
			// A reserved value that is not in decimal canonical form is
			// still a property to keep byte for byte.
			var err error
			m, err = m.WithReserved(message.KeyTimeTick, "+0"+strconv.Itoa(i))
			require.NoError(t, err)
		}
		msgs[i] = m
	}
	return msgs
}

// testConcurrentAppendRead runs appenders that start together and append
// many messages each, so that their appends really overlap, with readers
// started before and after.
func testConcurrentAppendRead(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("concurrent"), 1, walimpls.ReadWrite)
	before := []walimpls.Scanner{e.read(w, cursor.All()), e.read(w, cursor.All())}

	var (
		mu       sync.Mutex
		acked    = map[string]message.Message{} // marshalled id → message
		wg       sync.WaitGroup
		errs     = make(chan error, appenders)
		start    = make(chan struct{})
		progress atomic.Int64
	)
	for g := range appenders {
		msgs := e.writerMessages(t, g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var last message.ID
			for i, m := range msgs {
				ctx, cancel := e.call()
				id, err := walimpls.Append(ctx, w, m)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("writer %d append %d: %w", g, i, err)
					return
				}
				progress.Inc()
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
	close(start)
	e.waitProgress(&wg, &progress, "concurrent appenders")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, acked, appenders*messagesPerWriter)

	after := e.read(w, cursor.All())
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

// waitProgress waits for wg, failing the part when the counter stops moving
// for a whole wait timeout: appenders that hang fail the part instead of
// the run.
func (e *env) waitProgress(wg *sync.WaitGroup, progress *atomic.Int64, what string) {
	e.t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(e.opts.waitTimeout)
	defer tick.Stop()
	seen := progress.Load()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			now := progress.Load()
			if now == seen {
				require.FailNowf(e.t, "watchdog", "%s made no progress in %s (%d appends done)", what, e.opts.waitTimeout, now)
			}
			seen = now
		}
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

	// The order read back is the order of the IDs.
	checkSequence(t, ids, msgs, e.recv(e.read(w, cursor.All()), len(ids)))
}

// testCanonicalIDs checks that UnmarshalID accepts only what Marshal
// produces: every string it accepts marshals back to itself, so an ID has
// one text form (checkpoints compare and deduplicate by it).
func testCanonicalIDs(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("canon"), 1, walimpls.ReadWrite)
	ids := e.appendAll(w, simpleMessages(t, "canon", 12))

	for _, corrupt := range []string{"", "not-an-id", "\x00\xff\xfe", "%%%", "12ab!", " 1", "-1", "+1", "01", "00", "1 ", "0x1", "1e3"} {
		_, err := o.UnmarshalID(corrupt)
		require.ErrorIsf(t, err, message.ErrCorruptID, "unmarshal %q", corrupt)
	}
	canonical := func(s string) {
		t.Helper()
		id, err := o.UnmarshalID(s)
		if err != nil {
			require.ErrorIsf(t, err, message.ErrCorruptID, "unmarshal %q fails with another error", s)
			return
		}
		require.Equalf(t, s, id.Marshal(), "UnmarshalID accepted %q, which marshals back as %q: not the canonical form", s, id.Marshal())
	}
	r := rand.New(rand.NewPCG(7, 11))
	const alphabet = "0123456789:@-+. abAB_"
	for _, id := range ids {
		s := id.Marshal()
		for _, v := range []string{"0" + s, "+" + s, "-" + s, " " + s, s + " ", s + "\n", "00" + s, strings.ToUpper(s), s + ":", ":" + s, s + "@0", s + ":-1", s + ":0"} {
			canonical(v)
		}
		// Each byte of the form replaced, doubled or dropped.
		for i := range len(s) {
			canonical(s[:i] + s[i+1:])
			canonical(s[:i] + s[i:i+1] + s[i:])
			canonical(s[:i] + string(alphabet[r.IntN(len(alphabet))]) + s[i+1:])
		}
	}
	for range 500 {
		b := make([]byte, 1+r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		canonical(string(b))
	}
}

// testLast checks Last: zero for a channel that never held a message, the
// last acknowledged ID after sequential appends, on every node and in
// read-only mode, unchanged by a truncation, and never below an append
// acknowledged before it was called while appenders run.
func testLast(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("last")
	w := e.open(o, name, 1, walimpls.ReadWrite)
	ro := e.open(e.opener(), name, 0, walimpls.ReadOnly)
	for _, x := range []walimpls.WALImpl{w, ro} {
		id, err := e.last(x)
		require.NoError(t, err)
		require.Truef(t, id.IsZero(), "Last of an empty channel (%s) is %s, want the zero id", x.Channel(), id)
	}
	msgs := simpleMessages(t, "last", 5)
	var ids []message.ID
	for _, m := range msgs {
		ids = append(ids, e.appendAll(w, []message.Message{m})...)
		for _, x := range []walimpls.WALImpl{w, ro} {
			id, err := e.last(x)
			require.NoError(t, err)
			require.Truef(t, id.EQ(ids[len(ids)-1]), "Last of %s after %d appends: want %s, got %s", x.Channel(), len(ids), ids[len(ids)-1], id)
		}
	}
	require.NoError(t, e.truncate(w, ids[4]))
	id, err := e.last(w)
	require.NoError(t, err)
	require.Truef(t, id.EQ(ids[4]), "Last after truncating to the last message: want %s, got %s", ids[4], id)
	s := e.read(w, cursor.StartFrom(id))
	checkSequence(t, ids[4:], msgs[4:], e.recv(s, 1))
	e.quiet(s)

	// While appenders run, Last is at or after every append acknowledged
	// before the call, and is the ID of a stored message.
	var (
		mu       sync.Mutex
		maxAcked = ids[4]
		wg       sync.WaitGroup
		errs     = make(chan error, 4)
		progress atomic.Int64
		stop     = make(chan struct{})
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				ctx, cancel := e.call()
				id, err := walimpls.Append(ctx, w, mustMessage(t, []byte(fmt.Sprintf("c-%d-%d", g, i)), nil))
				cancel()
				if err != nil {
					errs <- err
					return
				}
				progress.Inc()
				mu.Lock()
				if maxAcked.LT(id) {
					maxAcked = id
				}
				mu.Unlock()
			}
		}()
	}
	seenLast := map[string]bool{}
	var lastErr error
	checker := make(chan struct{})
	go func() {
		defer close(checker)
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			floor := maxAcked
			mu.Unlock()
			ctx, cancel := e.call()
			l, err := w.Last(ctx)
			cancel()
			if err == nil && l.LT(floor) {
				err = fmt.Errorf("the WAL's Last returned %s, below %s acknowledged before the call", l, floor)
			}
			if err != nil {
				lastErr = err
				return
			}
			seenLast[l.Marshal()] = true
		}
	}()
	e.waitProgress(&wg, &progress, "appenders")
	close(stop)
	<-checker
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, lastErr)
	final, err := e.last(w)
	require.NoError(t, err)
	all := e.recv(e.read(w, cursor.All()), 1+4*50)
	require.Truef(t, all[len(all)-1].ID().EQ(final), "Last after the appenders: want %s, got %s", all[len(all)-1].ID(), final)
	stored := map[string]bool{}
	for _, m := range all {
		stored[m.ID().Marshal()] = true
	}
	for l := range seenLast {
		require.Truef(t, stored[l], "Last returned %s, which is not a stored message", l)
	}
}

func testDeliverPolicies(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("policies"), 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "pol", 13)
	ids := e.appendAll(w, msgs[:10])

	all := e.recv(e.read(w, cursor.All()), 10)
	checkSequence(t, ids, msgs[:10], all)
	first := e.read(w, cursor.StartFrom(ids[0]))
	checkSequence(t, ids, msgs[:10], e.recv(first, 10))
	e.quiet(first)

	from := e.read(w, cursor.StartFrom(ids[5]))
	checkSequence(t, ids[5:], msgs[5:10], e.recv(from, 5))
	e.quiet(from)
	after := e.read(w, cursor.StartAfter(ids[5]))
	checkSequence(t, ids[6:], msgs[6:10], e.recv(after, 4))
	e.quiet(after)
	last := e.read(w, cursor.StartAfter(ids[9]))

	latest := e.read(w, cursor.Latest())
	e.quiet(latest)
	ids = append(ids, e.appendAll(w, msgs[10:])...)
	checkSequence(t, ids[10:], msgs[10:], e.recv(latest, 3))
	e.quiet(latest)
	checkSequence(t, ids[10:], msgs[10:], e.recv(last, 3))
}

// testLatestStartsAtRead checks that cursor.Latest's position is taken when
// Read returns: an append made right after delivers, with no pause between.
func testLatestStartsAtRead(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("latest"), 1, walimpls.ReadWrite)
	e.appendAll(w, simpleMessages(t, "before", 3))
	for round := range 5 {
		s := e.read(w, cursor.Latest())
		m := mustMessage(t, []byte(fmt.Sprintf("right-after-read-%d", round)), nil)
		id := e.appendAll(w, []message.Message{m})[0]
		got := e.recv(s, 1)
		require.Truef(t, got[0].ID().EQ(id), "round %d: a Latest scanner delivered %s first, want %s appended right after Read returned", round, got[0].ID(), id)
		e.closeScanner(s)
	}
}

// testIdleTail checks that one append reaches an idle tailing scanner
// promptly, several times: a scanner must be woken by new messages, not
// find them on a timer of seconds.
func testIdleTail(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("idle"), 1, walimpls.ReadWrite)
	s := e.read(w, cursor.Latest())
	from := e.read(w, cursor.All())
	for round := range 4 {
		e.quiet(s) // idle: nothing pending, the scanner waits
		m := mustMessage(t, []byte(fmt.Sprintf("idle-%d", round)), nil)
		start := time.Now()
		id := e.appendAll(w, []message.Message{m})[0]
		for _, x := range []walimpls.Scanner{s, from} {
			got := e.recvWithin(x, e.prompt(), fmt.Sprintf("round %d: one append to an idle tailing scanner", round))
			require.Truef(t, got.ID().EQ(id), "round %d: delivered %s, want %s", round, got.ID(), id)
		}
		t.Logf("round %d: delivered %s after the append started", round, time.Since(start).Round(time.Millisecond))
	}
}

func testParallelChannels(t *testing.T, e *env) {
	o := e.opener()
	const n = 60
	names := []string{channelName("par-a"), channelName("par-b"), channelName("par-c")}
	wals := make([]walimpls.WALImpl, len(names))
	for i, name := range names {
		wals[i] = e.open(o, name, 1, walimpls.ReadWrite)
	}
	var (
		wg       sync.WaitGroup
		errs     = make(chan error, len(names))
		ids      = make([][]message.ID, len(names))
		msgs     = make([][]message.Message, len(names))
		start    = make(chan struct{})
		progress atomic.Int64
	)
	for i, name := range names {
		msgs[i] = simpleMessages(t, name, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j, m := range msgs[i] {
				ctx, cancel := e.call()
				id, err := walimpls.Append(ctx, wals[i], m)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("channel %s append %d: %w", name, j, err)
					return
				}
				progress.Inc()
				ids[i] = append(ids[i], id)
			}
		}()
	}
	close(start)
	e.waitProgress(&wg, &progress, "appenders of three channels")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range names {
		s := e.read(wals[i], cursor.All())
		checkSequence(t, ids[i], msgs[i], e.recv(s, n))
		e.quiet(s)
		last, err := e.last(wals[i])
		require.NoError(t, err)
		require.Truef(t, last.EQ(ids[i][n-1]), "Last of %s: want %s, got %s", names[i], ids[i][n-1], last)
	}
}

// testCallerBuffers checks that a backend keeps no reference to what the
// caller handed it: payload bytes and property maps overwritten after
// Append and AppendBatch returned do not change what readers get.
func testCallerBuffers(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("buffers"), 1, walimpls.ReadWrite)
	const n = 4
	type given struct {
		payload []byte
		props   map[string]string
	}
	var (
		gave []given
		want []message.Message
		ids  []message.ID
	)
	fresh := func(i int) message.Message {
		g := given{payload: []byte(fmt.Sprintf("payload-%d", i)), props: map[string]string{"k": fmt.Sprintf("v-%d", i)}}
		gave = append(gave, g)
		want = append(want, mustMessage(t, append([]byte(nil), g.payload...), maps.Clone(g.props)))
		return message.Restore(g.payload, g.props)
	}
	for i := range n {
		id, err := e.appendOne(w, fresh(i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	batch := []message.Message{fresh(n), fresh(n + 1)}
	got, err := within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) { return w.AppendBatch(ctx, batch) })
	require.NoError(t, err)
	ids = append(ids, got...)
	for _, g := range gave {
		for i := range g.payload {
			g.payload[i] = 'X'
		}
		g.props["k"] = "overwritten"
		g.props["added"] = "after the append returned"
	}
	checkSequence(t, ids, want, e.recv(e.read(w, cursor.All()), len(want)))
}
