package local

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func TestReopenKeepsMessagesTermsAndTruncation(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := openStore(t, cfg)
	a := openWAL(t, s, "a", 3)
	b := openWAL(t, s, "b", 1)
	idsA := appendN(t, a, "a", 50)
	idsB := appendN(t, b, "b", 50)
	require.NoError(t, a.Truncate(context.Background(), idsA[10]))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "second Close")

	s = openStore(t, cfg)
	_, err := s.Open(context.Background(), walimpls.Channel{Name: "a", Term: 2})
	require.ErrorIs(t, err, walimpls.ErrFenced, "the term survives a reopen")
	var fe *walimpls.FencedError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, int64(3), fe.CurrentTerm)

	a = openWAL(t, s, "a", 3)
	got := readN(t, a, cursor.All(), 40)
	for i, m := range got {
		require.True(t, m.ID().EQ(idsA[10+i]))
		require.Equal(t, msg(t, "a-"+strconv.Itoa(10+i)).Payload(), m.Payload())
	}
	_, err = a.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.StartFrom(idsA[9])})
	require.ErrorIs(t, err, walimpls.ErrPositionGone, "the truncation point survives a reopen")

	b = openWAL(t, s, "b", 1)
	got = readN(t, b, cursor.All(), 50)
	require.True(t, got[49].ID().EQ(idsB[49]))

	// IDs go on increasing after the reopen.
	id := appendN(t, b, "b-after", 1)[0]
	require.True(t, idsB[49].LT(id))
	require.True(t, idsA[49].LT(id))
	require.Zero(t, s.Recovery().DroppedBytes)
}

func TestSecondStoreOnTheSameRootIsLocked(t *testing.T) {
	dir := t.TempDir()
	openStore(t, testConfig(dir))
	_, err := New(context.Background(), testConfig(dir))
	require.ErrorIs(t, err, ErrLocked)
	require.Contains(t, err.Error(), "pid ")
}

func TestTruncationDeletesSegments(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.SegmentBytes = 64 << 10
	cfg.MaxMessageBytes = 8 << 10
	s := openStore(t, cfg)
	a := openWAL(t, s, "a", 1)
	b := openWAL(t, s, "b", 1)
	big := strings.Repeat("x", 4000)
	var idsA, idsB []message.ID
	for i := 0; i < 100; i++ {
		id, err := walimpls.Append(context.Background(), a, msg(t, big))
		require.NoError(t, err)
		idsA = append(idsA, id)
		if i%10 == 0 {
			id, err := walimpls.Append(context.Background(), b, msg(t, "b"))
			require.NoError(t, err)
			idsB = append(idsB, id)
		}
	}
	segs := func() int {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segments)
	}
	n := segs()
	require.Greater(t, n, 5)

	// a alone truncating frees nothing: b still has messages everywhere.
	passes := s.prep.collections.Load()
	require.NoError(t, a.Truncate(context.Background(), idsA[99]))
	require.Eventually(t, func() bool { return s.prep.collections.Load() > passes }, 10*time.Second, time.Millisecond,
		"the collection pass the truncation asked for")
	require.Equal(t, n, segs())

	// Once b truncates too, every segment but the last ones goes.
	require.NoError(t, b.Truncate(context.Background(), idsB[len(idsB)-1]))
	require.Eventually(t, func() bool { return segs() <= 2 }, 10*time.Second, time.Millisecond)
	var rec dto.Metric
	require.NoError(t, s.m.recycled.Write(&rec))
	require.Equal(t, 1.0, rec.GetCounter().GetValue(), "one freed segment becomes the spare")
	// Writing on goes through the recycled segment.
	for i := 0; i < 30; i++ {
		id, err := walimpls.Append(context.Background(), b, msg(t, big))
		require.NoError(t, err)
		idsB = append(idsB, id)
	}
	got := readN(t, a, cursor.All(), 1)
	require.True(t, got[0].ID().EQ(idsA[99]))

	// Beyond the last message is an error that removes nothing.
	future := message.NewSeqID(Name, 1<<40)
	require.ErrorIs(t, a.Truncate(context.Background(), future), walimpls.ErrInvalidPosition)

	// The deleted segments stay deleted across a reopen, and the recycled
	// one reads back right.
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	a = openWAL(t, s, "a", 1)
	got = readN(t, a, cursor.All(), 1)
	require.True(t, got[0].ID().EQ(idsA[99]))
	b = openWAL(t, s, "b", 1)
	got = readN(t, b, cursor.All(), 31)
	require.True(t, got[30].ID().EQ(idsB[len(idsB)-1]))
	require.Zero(t, s.Recovery().DroppedBytes)
}

func TestFencingAcrossOpeners(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	n1, n2 := s.NewOpener(), s.NewOpener()
	defer n1.Close()
	defer n2.Close()
	w1 := openWAL(t, n1, "c", 1)
	appendN(t, w1, "one", 3)
	w2 := openWAL(t, n2, "c", 2)
	_, err := walimpls.Append(context.Background(), w1, msg(t, "late"))
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.ErrorIs(t, w1.Truncate(context.Background(), message.NewSeqID(Name, 1)), walimpls.ErrFenced)
	appendN(t, w2, "two", 1)
	// The same term may reopen, and the later open wins; a read-only open
	// fences nobody.
	w2b := openWAL(t, n1, "c", 2)
	appendN(t, w2b, "two-b", 1)
	ro, err := n1.Open(context.Background(), walimpls.Channel{Name: "c", Term: 9, Mode: walimpls.ReadOnly})
	require.NoError(t, err)
	defer ro.Close()
	_, err = walimpls.Append(context.Background(), ro, msg(t, "x"))
	require.ErrorIs(t, err, walimpls.ErrReadOnly)
	appendN(t, w2b, "two-b", 1)
	_, err = walimpls.Append(context.Background(), w2, msg(t, "two"))
	require.ErrorIs(t, err, walimpls.ErrFenced, "fenced by the later open of its own term")
}

func TestTooLargeAndClosed(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	w := openWAL(t, s, "c", 1)
	_, err := walimpls.Append(context.Background(), w, msg(t, strings.Repeat("x", 64<<10)))
	require.ErrorIs(t, err, walimpls.ErrTooLarge)
	// Many tiny properties: the encoding is larger than Size, and must
	// still not be accepted if it cannot fit in a segment.
	require.NoError(t, s.Close())
	_, err = walimpls.Append(context.Background(), w, msg(t, "x"))
	require.ErrorIs(t, err, walimpls.ErrClosed)
	_, err = s.Open(context.Background(), walimpls.Channel{Name: "c", Term: 1})
	require.ErrorIs(t, err, walimpls.ErrClosed)
	_, err = w.Read(context.Background(), walimpls.ReadOption{})
	require.ErrorIs(t, err, walimpls.ErrClosed)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{Dir: "x"}.Validate())
	for _, c := range []Config{
		{},
		{Dir: "x", SegmentBytes: 1000},
		{Dir: "x", SegmentBytes: 2 << 30},
		{Dir: "x", Sync: "sometimes"},
		{Dir: "x", MaxMessageBytes: 40 << 20},
		{Dir: "x", SyncInterval: -1},
		{Dir: "x", ReadAheadBytes: -1},
	} {
		require.ErrorIs(t, c.Validate(), walimpls.ErrInvalidConfig, "%+v", c)
		_, err := New(context.Background(), c)
		require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	}
}

func TestBuilder(t *testing.T) {
	reg := walimpls.NewRegistry()
	require.NoError(t, reg.Register(NewBuilder()))
	b, err := reg.Lookup("local")
	require.NoError(t, err)
	dir := t.TempDir()
	promReg := prometheus.NewRegistry()
	o, err := b.Build(context.Background(), walimpls.BuildParams{
		Config: func(into any) error {
			into.(*Config).Dir = dir
			into.(*Config).Sync = SyncInterval
			return nil
		},
		Registerer: promReg,
	})
	require.NoError(t, err)
	require.False(t, o.Capabilities().Durable)
	require.True(t, o.Capabilities().Fencing)
	require.Equal(t, DefaultMaxMessageBytes, o.Capabilities().MaxMessageBytes)
	w := openWAL(t, o, "c", 1)
	ids := appendN(t, w, "x", 3)
	id, err := o.UnmarshalID(ids[2].Marshal())
	require.NoError(t, err)
	require.True(t, id.EQ(ids[2]))
	_, err = o.UnmarshalID("-1")
	require.ErrorIs(t, err, message.ErrCorruptID)
	mfs, err := promReg.Gather()
	require.NoError(t, err)
	require.NotEmpty(t, mfs)
	require.NoError(t, o.Close())

	_, err = b.Build(context.Background(), walimpls.BuildParams{})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig, "no dir")
	_, err = b.Build(context.Background(), walimpls.BuildParams{Config: func(any) error { return errors.New("bad yaml") }})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
}

func TestScannerFallsBehindTruncation(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	w := openWAL(t, s, "c", 1)
	ids := appendN(t, w, "x", 20)
	sc, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.All(), ReadAheadBytes: 1})
	require.NoError(t, err)
	defer sc.Close()
	m := <-sc.Chan()
	require.True(t, m.ID().EQ(ids[0]))
	require.NoError(t, w.Truncate(context.Background(), ids[10]))
	for m := range sc.Chan() {
		require.True(t, m.ID().LT(ids[3]), "at most what was read ahead is delivered, got %s", m.ID())
	}
	<-sc.Done()
	require.ErrorIs(t, sc.Error(), walimpls.ErrPositionGone)
}

func TestTailingScannerWakesOnAppend(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	w := openWAL(t, s, "c", 1)
	sc, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	defer sc.Close()
	for i := 0; i < 5; i++ {
		id := appendN(t, w, "x", 1)[0]
		select {
		case m := <-sc.Chan():
			require.True(t, m.ID().EQ(id))
		case <-time.After(10 * time.Second):
			require.FailNow(t, "tailing scanner not woken")
		}
	}
}

// TestDeliverTailStartsExactlyNFromTheEnd checks local's cursor.Tail beyond
// what the suite asks (which allows an earlier start): the start is exactly
// the n-th last message of the channel, counted in the channel's index and
// not in sequence numbers, which the channels of a store share; the first
// message kept when fewer are kept, also after truncation deleted the
// oldest segments and after a reopen rebuilt the index.
func TestDeliverTailStartsExactlyNFromTheEnd(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 64 << 10
	cfg.MaxMessageBytes = 8 << 10
	s := openStore(t, cfg)
	a := openWAL(t, s, "a", 1)
	b := openWAL(t, s, "b", 1)
	big := strings.Repeat("x", 2000)
	var idsA []message.ID
	for i := 0; i < 200; i++ {
		id, err := walimpls.Append(context.Background(), a, msg(t, big+strconv.Itoa(i)))
		require.NoError(t, err)
		idsA = append(idsA, id)
		// b's messages between a's make a's sequence numbers sparse.
		_, err = walimpls.Append(context.Background(), b, msg(t, "b"+strconv.Itoa(i)))
		require.NoError(t, err)
	}
	segs := func() int {
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segments)
	}
	require.Greater(t, segs(), 5, "precondition: the channel spans many segments")

	check := func(w walimpls.WALImpl, first int, when string) {
		t.Helper()
		kept := len(idsA) - first
		for _, n := range []int{1, 2, 17, kept - 1, kept, kept + 1, 1 << 30} {
			want := idsA[max(first, len(idsA)-n)]
			got := readN(t, w, cursor.Tail(n), 1)
			require.Truef(t, got[0].ID().EQ(want), "%s: DeliverTail(%d) starts at %s, want %s", when, n, got[0].ID(), want)
		}
		for _, n := range []int{0, -1} {
			_, err := w.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.Tail(n)})
			require.ErrorIsf(t, err, walimpls.ErrInvalidPosition, "%s: DeliverTail(%d)", when, n)
		}
	}
	check(a, 0, "untruncated")

	// Truncating both channels lets the oldest segments go.
	n := segs()
	require.NoError(t, a.Truncate(context.Background(), idsA[150]))
	bLast, err := b.Last(context.Background())
	require.NoError(t, err)
	require.NoError(t, b.Truncate(context.Background(), bLast))
	require.Eventually(t, func() bool { return segs() < n }, 10*time.Second, time.Millisecond)
	check(a, 150, "truncated")

	// The index a reopen rebuilds gives the same starts.
	require.NoError(t, s.Close())
	s = openStore(t, cfg)
	a = openWAL(t, s, "a", 1)
	check(a, 150, "reopened")
}
