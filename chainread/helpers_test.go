package chainread_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go's, as the pulsar backend's tests ignore them
		// (walimpls/impls/pulsar/main_test.go says why): a producer's
		// timeout loop that ends up to SendTimeout after Close, and the
		// reconnect goroutine of a producer the client closed itself
		// after ProducerFenced (the seals fence the Pulsar writer).
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
		goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).runEventsLoop.func1"),
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).grabConn.func1"),
	)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// backends are the backends a test's chains use: a memory cluster
// (fencing) and a local store, and a memory cluster that cannot fence.
type backends struct {
	mem, local, nofence walimpls.Opener
	openers             chainread.OpenerMap
	memCluster          *memory.Cluster
}

func newBackends(t testing.TB) *backends {
	ctx := testCtx(t)
	b := &backends{memCluster: memory.NewCluster()}
	var err error
	b.mem, err = memory.New(ctx, memory.Config{Cluster: b.memCluster})
	require.NoError(t, err)
	nf := memory.NewCluster()
	nf.SetFencing(false)
	b.nofence, err = memory.New(ctx, memory.Config{Cluster: nf})
	require.NoError(t, err)
	b.local, err = local.New(ctx, local.Config{Dir: t.TempDir(), Sync: local.SyncNone})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = b.mem.Close()
		_ = b.nofence.Close()
		_ = b.local.Close()
	})
	// memory2 and local2 are other entries on the same backends, so that
	// a chain can move from one to the other (neighbours differ by Name).
	b.openers = chainread.OpenerMap{"memory": b.mem, "local": b.local, "nofence": b.nofence, "memory2": b.mem, "local2": b.local}
	return b
}

func backend(name, channel string) chain.Backend {
	kind := name
	switch name {
	case "nofence", "memory2":
		kind = "memory"
	case "local2":
		kind = "local"
	}
	return chain.Backend{Name: name, Kind: kind, Channel: channel}
}

var at = time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)

// builder writes a chain by hand, the way a migration does: each segment
// is written through adaptor.Open at its term with the previous seal's
// timetick as floor, sealed by a ReadWrite open at the next term on its
// own backend (which fences the writer where the backend can) and its
// end read (Last) with the highest timetick up to it.
type builder struct {
	t     testing.TB
	b     *backends
	c     chain.Chain
	w     adaptor.WAL // the last segment's writer
	acked []acked     // every acknowledged append, in append order
	// store, when set (withStore), records every migration as a driver
	// does: its intent before the fence, its seal after.
	store *chain.Store
}

type acked struct {
	segment uint64
	res     adaptor.AppendResult
	payload string
}

func writerOptions(floor uint64) adaptor.Options {
	// Watermarks every 256 KiB, as a busy writer's would come: what a
	// segment's readers hold between two stays small. Tests of a few
	// hundred messages see none but the first and the Syncs.
	return adaptor.Options{TimeTickInterval: time.Hour, WatermarkBytes: 256 << 10, TimeTickFloor: floor, Logger: slog.New(slog.DiscardHandler)}
}

// newChain starts a chain whose segment 0 is on backend name, written at
// term 1.
func newChain(t testing.TB, b *backends, channel, name string) *builder {
	bl := &builder{t: t, b: b}
	bl.c = chain.Chain{Channel: channel, Segments: []chain.Segment{{Index: 0, Backend: backend(name, channel), FirstTerm: 1, Created: at}}}
	bl.openWriter(0)
	return bl
}

func (bl *builder) last() chain.Segment { return bl.c.Last() }

// withStore records the chain in a chain.Store over a bbolt file, from
// now on: its first segment now, each migration as it happens.
func (bl *builder) withStore() *chain.Store {
	kv, err := boltstore.Open(filepath.Join(bl.t.TempDir(), "meta.db"), boltstore.Options{})
	require.NoError(bl.t, err)
	bl.t.Cleanup(func() { _ = kv.Close() })
	require.Len(bl.t, bl.c.Segments, 1, "withStore starts with the chain's first segment")
	bl.store = chain.NewStore(kv, chain.Options{Clock: clockwork.NewFakeClockAt(at)})
	_, err = bl.store.Create(testCtx(bl.t), bl.c.Channel, bl.c.Segments[0].Backend, bl.c.Segments[0].FirstTerm)
	require.NoError(bl.t, err)
	return bl.store
}

func (bl *builder) openWriter(floor uint64) {
	seg := bl.last()
	o, err := bl.b.openers.Opener(seg.Backend)
	require.NoError(bl.t, err)
	w, err := adaptor.Open(testCtx(bl.t), o, adaptor.Channel{Name: seg.Backend.Channel, Term: seg.FirstTerm}, writerOptions(floor))
	require.NoError(bl.t, err)
	bl.t.Cleanup(func() { _ = w.Close() })
	bl.w = w
}

// append appends n messages from `writers` goroutines at once (so that
// IDs and timeticks may disagree), and a watermark.
func (bl *builder) append(n, writers int) {
	ctx := testCtx(bl.t)
	seg := bl.last().Index
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := len(bl.acked)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += writers {
				p := fmt.Sprintf("%s/s%d/%d", bl.c.Channel, seg, start+i)
				m, err := message.New([]byte(p), nil)
				if err != nil {
					panic(err)
				}
				r, err := bl.w.Append(ctx, m)
				if err != nil {
					panic(err) // only from a goroutine of the test: the test fails
				}
				mu.Lock()
				bl.acked = append(bl.acked, acked{segment: seg, res: r, payload: p})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// migrate seals the last segment at term and starts the next on backend
// name, written at term.
func (bl *builder) migrate(name string, term int64) {
	ctx := testCtx(bl.t)
	seg := bl.last()
	ch := fmt.Sprintf("%s-s%d", bl.c.Channel, seg.Index+1)
	if bl.store != nil {
		_, err := bl.store.BeginMigration(ctx, bl.c.Channel, chain.MigrationRequest{Segment: seg.Index, Target: backend(name, ch), Term: term, By: "test"})
		require.NoError(bl.t, err)
	}
	o, err := bl.b.openers.Opener(seg.Backend)
	require.NoError(bl.t, err)
	sealer, err := o.Open(ctx, walimpls.Channel{Name: seg.Backend.Channel, Term: term})
	require.NoError(bl.t, err)
	end, err := sealer.Last(ctx)
	require.NoError(bl.t, err)
	seal := &chain.Seal{Term: term, At: at}
	if seg.Index > 0 {
		seal.TimeTick = bl.c.Segments[len(bl.c.Segments)-2].Seal.TimeTick
	}
	if !end.IsZero() {
		seal.End = end.Marshal()
		seal.TimeTick = max(seal.TimeTick, maxTimeTick(bl.t, sealer, end))
	}
	require.NoError(bl.t, sealer.Close())
	bl.c.Segments[len(bl.c.Segments)-1].Seal = seal
	if bl.store != nil {
		_, err := bl.store.Seal(ctx, bl.c.Channel, chain.SealRequest{Segment: seg.Index, Term: term, End: seal.End, TimeTick: seal.TimeTick})
		require.NoError(bl.t, err)
	}
	bl.c.Segments = append(bl.c.Segments, chain.Segment{Index: seg.Index + 1, Backend: backend(name, ch), FirstTerm: term, Created: at})
	require.NoError(bl.t, bl.c.Validate())
	bl.openWriter(seal.TimeTick)
}

// maxTimeTick reads w up to end and returns the highest timetick there.
func maxTimeTick(t testing.TB, w walimpls.WALImpl, end message.ID) uint64 {
	s, err := w.Read(testCtx(t), walimpls.ReadOption{DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	defer s.Close()
	var hi uint64
	for m := range s.Chan() {
		if tt, ok := m.TimeTick(); ok {
			hi = max(hi, tt)
		}
		if !m.ID().LT(end) {
			return hi
		}
	}
	require.FailNow(t, "the scanner ended before the end", "%v", s.Error())
	return 0
}

func (bl *builder) reader(t testing.TB) *chainread.Reader {
	r, err := chainread.New(chainread.Config{Chain: bl.c, Openers: bl.b.openers, Options: adaptor.Options{Logger: slog.New(slog.DiscardHandler)}})
	require.NoError(t, err)
	return r
}

// sorted returns the acknowledged appends in timetick order.
func (bl *builder) sorted() []acked {
	out := append([]acked(nil), bl.acked...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].res.TimeTick < out[j-1].res.TimeTick; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// recv takes n messages from s, failing on a watchdog.
func recv(t testing.TB, s walimpls.Scanner, n int) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for len(out) < n {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "the scanner ended after %d of %d: %v", len(out), n, s.Error())
			out = append(out, m)
		case <-timer.C:
			require.FailNowf(t, "watchdog", "%d of %d", len(out), n)
		}
	}
	return out
}

// recvBatches takes n messages from s.
func recvBatches(t testing.TB, s walimpls.BatchScanner, n int) []message.Immutable {
	t.Helper()
	var out []message.Immutable
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for len(out) < n {
		select {
		case b, ok := <-s.Batches():
			require.Truef(t, ok, "the scanner ended after %d of %d: %v", len(out), n, s.Error())
			out = append(out, b...)
		case <-timer.C:
			require.FailNowf(t, "watchdog", "%d of %d", len(out), n)
		}
	}
	require.Len(t, out, n, "more than expected")
	return out
}

// check compares what a scanner delivered with the acknowledged appends
// it should deliver (in timetick order): exactly those, once, in order,
// each ID naming its segment.
func check(t testing.TB, want []acked, got []message.Immutable) {
	t.Helper()
	require.Len(t, got, len(want))
	for i, m := range got {
		require.Equalf(t, want[i].payload, string(m.Payload()), "message %d", i)
		tt, _ := m.TimeTick()
		require.Equal(t, want[i].res.TimeTick, tt)
		seg, id, ok := cursor.SplitID(m.ID())
		require.True(t, ok, "message %d: %s is a chain id", i, m.ID())
		require.Equal(t, want[i].segment, seg)
		require.True(t, want[i].res.ID.EQ(id), "message %d: %s, acknowledged at %s", i, id, want[i].res.ID)
		pos := cursor.PositionOf(m.ID())
		require.Equal(t, pos.String(), m.ID().Marshal())
	}
}
