package s3

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

type answer struct {
	ids []message.ID
	err error
}

func asyncAppend(t *testing.T, w walimpls.WALImpl, payload string) chan answer {
	t.Helper()
	m, err := message.New([]byte(payload), nil)
	require.NoError(t, err)
	res := make(chan answer, 1)
	w.(walimpls.AsyncAppender).AppendBatchAsync(context.Background(), []message.Message{m}, func(ids []message.ID, err error) {
		res <- answer{ids, err}
	})
	return res
}

func appendOK(t *testing.T, w walimpls.WALImpl, payload string) message.ID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := message.New([]byte(payload), nil)
	require.NoError(t, err)
	id, err := walimpls.Append(ctx, w, m)
	require.NoError(t, err)
	return id
}

func openWAL(t *testing.T, o *Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := o.Open(ctx, walimpls.Channel{Name: name, Term: term, Mode: mode})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func recvAnswer(t *testing.T, c chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-time.After(20 * time.Second):
		require.FailNow(t, "no answer")
	}
	return answer{}
}

// slotPath is the end of the URL path of a slot's key.
func slotPath(name string, epoch, slot uint64) string {
	return fmt.Sprintf("/%s/e%020d/%020d", name, epoch, slot)
}

// readPayloads reads a channel from the start until it has delivered
// want, and returns every payload delivered on the way.
func readPayloads(t *testing.T, w walimpls.WALImpl, want string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := w.Read(ctx, walimpls.ReadOption{})
	require.NoError(t, err)
	defer s.Close()
	var got []string
	for {
		select {
		case m, ok := <-s.Chan():
			require.True(t, ok, "scanner ended: %v", s.Error())
			got = append(got, string(m.Payload()))
			if string(m.Payload()) == want {
				return got
			}
		case <-ctx.Done():
			require.FailNowf(t, "watchdog", "%q not delivered; got %q", want, got)
		}
	}
}

// The pipelining gap: the old writer's slot n+1 is held back while n+2
// lands; a new owner fences n+1; the old writer acknowledges nothing at
// or after n+1, and no reader ever delivers n+2.
func TestPipeliningGap(t *testing.T) {
	st := newTestStore(t)
	var hold *holder
	cfg := st.config(func(rt http.RoundTripper) http.RoundTripper { hold = newHolder(rt); return hold })
	oldNode := newOpener(t, cfg)
	plain := cfg
	plain.HTTPClient = &http.Client{Transport: st.base}
	newNode := newOpener(t, plain)
	const name = "gap"
	old := openWAL(t, oldNode, name, 1, walimpls.ReadWrite)
	appendOK(t, old, "n")

	hold.hold(putTo(slotPath(name, 0, 1)))
	a1 := asyncAppend(t, old, "n+1")
	held := hold.wait(t)
	hold.hold(nil)
	a2 := asyncAppend(t, old, "n+2")
	require.Eventually(t, func() bool {
		info, err := newNode.headSlot(context.Background(), name, 0, 2)
		return err == nil && info.state == slotData
	}, 20*time.Second, 5*time.Millisecond, "slot n+2 lands")

	nw := openWAL(t, newNode, name, 2, walimpls.ReadWrite)
	info, err := newNode.headSlot(context.Background(), name, 0, 1)
	require.NoError(t, err)
	require.Equal(t, slotFence, info.state, "the new owner fenced n+1")

	close(held.release)
	r1, r2 := recvAnswer(t, a1), recvAnswer(t, a2)
	require.ErrorIs(t, r1.err, walimpls.ErrFenced)
	require.True(t, walimpls.NotStored(r1.err), "n+1 met the fence: stored nowhere")
	require.Error(t, r2.err, "n+2 follows a fenced slot: never acknowledged")
	require.True(t, walimpls.NotStored(r2.err), "n+2 lies after the fence: no reader delivers it")
	_, err = walimpls.Append(context.Background(), old, message.Message{})
	require.ErrorIs(t, err, walimpls.ErrFenced)

	appendOK(t, nw, "new")
	for _, w := range []walimpls.WALImpl{nw, old, openWAL(t, newOpener(t, plain), name, 0, walimpls.ReadOnly)} {
		require.Equal(t, []string{"n", "new"}, readPayloads(t, w, "new"))
	}
}

// The deleted-slot zombie: a writer stalls with a flush held back, a new
// owner fences it and truncates its slots away; resumed, the stalled
// writer gets nothing acknowledged and recreates nothing.
func TestDeletedSlotZombie(t *testing.T) {
	st := newTestStore(t)
	var hold *holder
	cfg := st.config(func(rt http.RoundTripper) http.RoundTripper { hold = newHolder(rt); return hold })
	zombieNode := newOpener(t, cfg)
	plain := cfg
	plain.HTTPClient = &http.Client{Transport: st.base}
	owner := newOpener(t, plain)
	const name = "zombie"
	z := openWAL(t, zombieNode, name, 1, walimpls.ReadWrite)
	for i := range 5 {
		appendOK(t, z, fmt.Sprint("z", i))
	}
	hold.hold(putTo(slotPath(name, 0, 5)))
	stalled := asyncAppend(t, z, "stalled")
	held := hold.wait(t)
	hold.hold(nil)

	w := openWAL(t, owner, name, 2, walimpls.ReadWrite)
	id := appendOK(t, w, "owner")
	require.NoError(t, w.Truncate(context.Background(), id))
	for s := uint64(0); s < 5; s++ {
		info, err := owner.headSlot(context.Background(), name, 0, s)
		require.NoError(t, err)
		require.Equal(t, slotMissing, info.state, "slot %d truncated away", s)
	}

	close(held.release)
	a := recvAnswer(t, stalled)
	require.ErrorIs(t, a.err, walimpls.ErrFenced)
	_, err := walimpls.Append(context.Background(), z, message.Message{})
	require.ErrorIs(t, err, walimpls.ErrFenced)
	for s := uint64(0); s < 5; s++ {
		info, err := owner.headSlot(context.Background(), name, 0, s)
		require.NoError(t, err)
		require.Equal(t, slotMissing, info.state, "slot %d stays empty", s)
	}
	info, err := owner.headSlot(context.Background(), name, 0, 5)
	require.NoError(t, err)
	require.Equal(t, slotFence, info.state, "the fence is kept")
	require.Equal(t, []string{"owner"}, readPayloads(t, w, "owner"))
}

// dropResponse forwards the first PUT it picks and then reports a
// dropped connection (the SDK retries it); before, it may run a hook.
type dropResponse struct {
	next    http.RoundTripper
	pick    func(*http.Request) bool
	forward bool // forward the first try (its PUT lands) or not
	before  func()
	done    atomic.Bool
}

func (d *dropResponse) RoundTrip(r *http.Request) (*http.Response, error) {
	if d.pick(r) && d.done.CompareAndSwap(false, true) {
		if d.forward {
			resp, err := d.next.RoundTrip(r)
			if err == nil {
				drain(resp.Body)
			}
		}
		if d.before != nil {
			d.before()
		}
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return d.next.RoundTrip(r)
}

// A PUT whose first try landed and whose answer was lost is retried, meets
// 412, and finds its own nonce: acknowledged once, read once.
func TestRetriedPutMeetsItsOwnObject(t *testing.T) {
	st := newTestStore(t)
	const name = "retry-own"
	drop := &dropResponse{pick: putTo(slotPath(name, 0, 1)), forward: true}
	cfg := st.config(func(rt http.RoundTripper) http.RoundTripper { drop.next = rt; return drop })
	o := newOpener(t, cfg)
	w := openWAL(t, o, name, 1, walimpls.ReadWrite)
	appendOK(t, w, "first")
	id := appendOK(t, w, "retried")
	require.True(t, drop.done.Load(), "the first try's answer was dropped")
	require.Equal(t, "0.1.0", id.Marshal())
	appendOK(t, w, "after")
	require.Equal(t, []string{"first", "retried", "after"}, readPayloads(t, w, "after"))
	require.Equal(t, 1.0, counterValue(t, o.m.preconditions.WithLabelValues("own_retry")))
}

// A PUT retried after a dropped first try that meets another's object
// there is fenced.
func TestRetriedPutMeetsAnothersObject(t *testing.T) {
	st := newTestStore(t)
	const name = "retry-other"
	plain := st.config(nil)
	other := newOpener(t, plain)
	drop := &dropResponse{pick: putTo(slotPath(name, 0, 1)), before: func() {
		key := other.keys.slot(name, 0, 1)
		body := sealObject(appendHeader(nil, objectHeader{kind: kindData, epoch: 0, slot: 1, count: 0}))
		_, err := other.st.put(context.Background(), reqPut, key, body,
			map[string]string{metaKind: "data", metaNonce: "not-yours"}, putCond{createOnly: true})
		if err != nil {
			panic(err)
		}
	}}
	cfg := plain
	cfg.HTTPClient = &http.Client{Transport: drop}
	drop.next = st.base
	o := newOpener(t, cfg)
	w := openWAL(t, o, name, 1, walimpls.ReadWrite)
	appendOK(t, w, "first")
	_, err := walimpls.Append(context.Background(), w, message.Message{})
	require.ErrorIs(t, err, walimpls.ErrFenced)
	require.Contains(t, err.Error(), "another writer's object")
	require.Equal(t, 1.0, counterValue(t, o.m.preconditions.WithLabelValues("fenced")))
}

// A Delete by one node fences another's writer with Deleted set, through
// the fence its next flush meets.
func TestDeleteFenceSaysDeleted(t *testing.T) {
	st := newTestStore(t)
	cfg := st.config(nil)
	a, b := newOpener(t, cfg), newOpener(t, cfg)
	w := openWAL(t, a, "gone", 3, walimpls.ReadWrite)
	appendOK(t, w, "x")
	require.NoError(t, b.Delete(context.Background(), "gone"))
	_, err := walimpls.Append(context.Background(), w, message.Message{})
	var fe *walimpls.FencedError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.True(t, fe.Deleted, "%v", err)
	require.True(t, strings.Contains(err.Error(), "deleted"), "%v", err)
}

// A seal behind a writer still flushing may leave several fences in an
// epoch (an open that died before removing its spares), with the writer's
// late flushes between them: Delete keeps every fence, so that no slot a
// stalled writer may still put at opens up again, and removes the rest.
func TestDeleteKeepsEveryFence(t *testing.T) {
	st := newTestStore(t)
	o := newOpener(t, st.config(nil))
	ctx := context.Background()
	const name = "fences"
	w := openWAL(t, o, name, 1, walimpls.ReadWrite)
	for i := range 5 {
		appendOK(t, w, fmt.Sprint("m", i)) // slots 0..4
	}
	require.NoError(t, w.Close())
	for _, s := range []uint64{5, 7} {
		fenced, ours, err := o.putFence(ctx, name, 0, s, 5, 2, false)
		require.NoError(t, err)
		require.True(t, fenced && ours)
	}
	late := map[string]string{metaKind: "data", metaTerm: "1", metaCount: "0", metaNonce: "late"}
	for _, s := range []uint64{6, 8} {
		_, err := o.st.put(ctx, reqPut, o.keys.slot(name, 0, s), []byte("late flush"), late, putCond{createOnly: true})
		require.NoError(t, err)
	}
	require.NoError(t, o.Delete(ctx, name))
	for s := range uint64(9) {
		info, err := o.headSlot(ctx, name, 0, s)
		require.NoError(t, err)
		want := slotMissing
		if s == 5 || s == 7 {
			want = slotFence
		}
		require.Equal(t, want, info.state, "slot %d", s)
	}
}

// An open whose manifest write landed and whose answer was lost meets 412
// on the client's retry, reads the manifest again and finds its own claim
// on the open epoch: it writes there, with no other epoch recorded and
// nothing fenced.
func TestLostManifestAnswerFindsItsClaim(t *testing.T) {
	st := newTestStore(t)
	const name = "claim-own"
	plain := st.config(nil)
	first := newOpener(t, plain)
	w := openWAL(t, first, name, 1, walimpls.ReadWrite)
	appendOK(t, w, "first")
	require.NoError(t, w.Close())

	drop := &dropResponse{pick: putTo("/" + name + "/manifest"), forward: true, next: st.base}
	cfg := plain
	cfg.HTTPClient = &http.Client{Transport: drop}
	o := newOpener(t, cfg)
	w2 := openWAL(t, o, name, 2, walimpls.ReadWrite)
	require.True(t, drop.done.Load(), "the manifest write's answer was dropped")
	m, _, err := o.getManifest(t.Context(), name)
	require.NoError(t, err)
	require.Equal(t, uint64(2), m.NextEpoch, "epochs recorded: %s", m.describe())
	require.Len(t, m.Epochs, 2, m.describe())
	require.Equal(t, int64(2), m.Epochs[1].Term)
	require.False(t, m.Epochs[1].Sealed)
	require.Equal(t, 0.0, counterValue(t, o.m.preconditions.WithLabelValues("fenced")))

	id := appendOK(t, w2, "second")
	require.Equal(t, "1.0.0", id.Marshal())
	require.Equal(t, []string{"first", "second"}, readPayloads(t, w2, "second"))
}
