package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// dataPuts counts the PUTs of slots (not manifests, hints or probes).
func dataPuts(c *counter) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.all {
		if strings.HasPrefix(r, "PUT ") && strings.Contains(r, "/e0") && !strings.HasSuffix(r, "/hint") {
			n++
		}
	}
	return n
}

// Concurrent appends share objects: with a clock that never moves, only
// FlushRecords flushes, so 64 one-message appends make exactly 4 PUTs.
func TestGroupCommit(t *testing.T) {
	st := newTestStore(t)
	var cnt *counter
	cfg := st.config(func(rt http.RoundTripper) http.RoundTripper { cnt = newCounter(rt); return cnt })
	clock := clockwork.NewFakeClock()
	cfg.FlushRecords = 16
	o := newOpener(t, cfg, walimpls.WithClock(clock))
	w := openWAL(t, o, "group", 1, walimpls.ReadWrite)
	cnt.reset()
	var wg sync.WaitGroup
	ids := make([]message.ID, 64)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = appendOK(t, w, fmt.Sprint(i))
		}()
	}
	wg.Wait()
	require.Equal(t, 4, dataPuts(cnt), "64 appends, 16 records a flush")
	slots := map[string]int{}
	for _, id := range ids {
		p, err := posOf(id)
		require.NoError(t, err)
		slots[fmt.Sprint(p.slot)]++
	}
	require.Len(t, slots, 4)
	for s, n := range slots {
		require.Equal(t, 16, n, "slot %s", s)
	}
}

// MaxBufferedBytes bounds what waits or flies: with every PUT held, an
// append beyond it waits, and gives up when its context ends.
func TestBackpressure(t *testing.T) {
	st := newTestStore(t)
	var hold *holder
	cfg := st.config(func(rt http.RoundTripper) http.RoundTripper { hold = newHolder(rt); return hold })
	cfg.MaxBufferedBytes = 4 << 10
	o := newOpener(t, cfg)
	w := openWAL(t, o, "pressure", 1, walimpls.ReadWrite).(*wal)
	hold.hold(func(r *http.Request) bool { return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/e0") })
	payload := bytes.Repeat([]byte("x"), 1000)
	var answers []chan answer
	for range 4 {
		answers = append(answers, asyncAppend(t, w, string(payload)))
	}
	held := hold.wait(t) // the first flush is on its way
	require.LessOrEqual(t, w.wr.budget.inUse(), cfg.MaxBufferedBytes)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	m, _ := message.New(payload, nil)
	_, err := walimpls.Append(ctx, w, m)
	require.ErrorIs(t, err, context.DeadlineExceeded, "an append beyond the buffer waits, and honours its context")
	require.True(t, walimpls.NotStored(err))
	require.LessOrEqual(t, w.wr.budget.inUse(), cfg.MaxBufferedBytes)

	hold.hold(nil)
	close(held.release)
	for {
		select {
		case hr := <-hold.held:
			close(hr.release)
			continue
		default:
		}
		break
	}
	for _, a := range answers {
		require.NoError(t, recvAnswer(t, a).err)
	}
	appendOK(t, w, "room again")
	require.Zero(t, w.wr.budget.inUse())
}

// An idle WAL makes no requests: no timer does I/O while the queue is
// empty.
func TestIdleWriterMakesNoRequests(t *testing.T) {
	st := newTestStore(t)
	var cnt *counter
	cfg := st.config(func(rt http.RoundTripper) http.RoundTripper { cnt = newCounter(rt); return cnt })
	clock := clockwork.NewFakeClock()
	cfg.HintEvery = 1
	o := newOpener(t, cfg, walimpls.WithClock(clock))
	w := openWAL(t, o, "idle", 1, walimpls.ReadWrite)
	a := asyncAppend(t, w, "one")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the flush timer is armed")
	clock.Advance(cfg.FlushInterval)
	require.NoError(t, recvAnswer(t, a).err)
	require.Eventually(t, func() bool { return cnt.count(http.MethodPut) >= 3 }, 10*time.Second, time.Millisecond,
		"the flush and its hint are written") // manifest, slot 0, hint
	w.(*wal).wr.close() // waits for the hint
	before := cnt.total()
	for range 100 {
		clock.Advance(time.Second)
	}
	require.Equal(t, before, cnt.total(), "requests while idle")

	w2 := openWAL(t, o, "idle2", 1, walimpls.ReadWrite)
	_ = w2
	before = cnt.total()
	for range 100 {
		clock.Advance(time.Second)
	}
	require.Equal(t, before, cnt.total(), "requests of a WAL that never appended")
}

// flipByte changes one byte of an object in the store, behind the
// backend's back.
func (s *testStore) flipByte(t *testing.T, key string, at int) {
	t.Helper()
	obj, err := s.backend.GetObject(testBucket, key, nil)
	require.NoError(t, err)
	body, err := io.ReadAll(obj.Contents)
	require.NoError(t, err)
	body[at] ^= 0xff
	_, err = s.backend.PutObject(testBucket, key, obj.Metadata, bytes.NewReader(body), int64(len(body)), nil)
	require.NoError(t, err)
}

// A corrupt object fails the scanner with an error naming its key; the
// scanner never skips it.
func TestCorruptObjectFailsTheScanner(t *testing.T) {
	st := newTestStore(t)
	cfg := st.config(nil)
	o := newOpener(t, cfg)
	w := openWAL(t, o, "corrupt", 1, walimpls.ReadWrite)
	for i := range 3 {
		appendOK(t, w, fmt.Sprint("m", i))
	}
	key := o.keys.slot("corrupt", 0, 1)
	st.flipByte(t, key, headerSize+6)

	reader := openWAL(t, newOpener(t, cfg), "corrupt", 0, walimpls.ReadOnly)
	s, err := reader.Read(context.Background(), walimpls.ReadOption{})
	require.NoError(t, err)
	defer s.Close()
	var got []string
	for m := range s.Chan() {
		got = append(got, string(m.Payload()))
	}
	<-s.Done()
	require.Equal(t, []string{"m0"}, got, "nothing after the corrupt object")
	require.ErrorIs(t, s.Error(), errCorrupt)
	require.Contains(t, s.Error().Error(), key)
	require.Contains(t, s.Error().Error(), "CRC")
}

// holdPut holds the first request pick matches until release is closed.
type holdPut struct {
	next             http.RoundTripper
	pick             func(*http.Request) bool
	entered, release chan struct{}
	once             sync.Once
}

func (h *holdPut) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.pick(r) {
		h.once.Do(func() {
			close(h.entered)
			<-h.release
		})
	}
	return h.next.RoundTrip(r)
}

// An AppendBatch whose context ends while its flush is on its way returns
// at once (outcome unknown), and its caller may then reuse its payload:
// the flush, landing after, stores what was appended, not what the buffer
// holds by then.
func TestAppendBatchReturnsBeforeItsFlush(t *testing.T) {
	st := newTestStore(t)
	const name = "early-return"
	hold := &holdPut{next: st.base, pick: putTo(slotPath(name, 0, 0)), entered: make(chan struct{}), release: make(chan struct{})}
	cfg := st.config(nil)
	cfg.HTTPClient = &http.Client{Transport: hold}
	o := newOpener(t, cfg)
	w := openWAL(t, o, name, 1, walimpls.ReadWrite)

	payload := []byte("appended")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-hold.entered
		cancel()
	}()
	_, err := w.AppendBatch(ctx, []message.Message{message.Restore(payload, nil)})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, walimpls.NotStored(err), "on its way: the outcome is unknown")
	copy(payload, "XXXXXXXX") // the caller's to reuse now
	close(hold.release)

	appendOK(t, w, "next")
	require.Equal(t, []string{"appended", "next"}, readPayloads(t, w, "next"))
}
