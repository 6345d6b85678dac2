package walimplstest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// Asynchronous appends (walimpls.AsyncAppender) keep every promise of
// AppendBatch; only the way the answer comes differs. The suite checks them
// by running its appending parts a second time, under "Async", on WALs
// whose Append and AppendBatch go through AppendBatchAsync and wait for
// done (counting its calls: a second is a broken promise), and adds one
// part of its own for what only pipelined appends can get wrong
// (AsyncPipeline).

// asyncParts are the parts that run again under "Async": those that append.
var asyncParts = map[string]bool{
	"Lifecycle":              true,
	"SizeLimit":              true,
	"ConcurrentAppendRead":   true,
	"CallerBuffers":          true,
	"AppendBatch":            true,
	"IDOrder":                true,
	"Context":                true,
	"ParallelChannels":       true,
	"Fencing":                true,
	"SameTermTakeover":       true,
	"Delete":                 true,
	"DeleteFencesOtherNodes": true,
}

// asyncWAL is a WAL whose AppendBatch, and so walimpls.Append, goes through
// AppendBatchAsync.
type asyncWAL struct {
	walimpls.WALImpl
	aa walimpls.AsyncAppender
	e  *env
}

func (w *asyncWAL) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	answer := make(chan asyncAnswer, 1)
	w.e.appendAsync(w.aa, ctx, msgs, func(ids []message.ID, err error) { answer <- asyncAnswer{ids: ids, err: err} })
	// A done that never comes fails the part on the watchdog of the call
	// that waits here (within), or on this one for a part that calls
	// walimpls.Append itself.
	timer := time.NewTimer(w.e.opts.waitTimeout + time.Second)
	defer timer.Stop()
	select {
	case a := <-answer:
		return a.ids, a.err
	case <-timer.C:
		return nil, fmt.Errorf("AppendBatchAsync did not call done within %s", w.e.opts.waitTimeout)
	}
}

// asyncAnswer is what done was called with.
type asyncAnswer struct {
	ids []message.ID
	err error
}

// appendAsync hands msgs to aa and passes the first call of done on; a
// second call is a broken promise, reported when the part ends.
func (e *env) appendAsync(aa walimpls.AsyncAppender, ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	var calls atomic.Int32
	aa.AppendBatchAsync(ctx, msgs, func(ids []message.ID, err error) {
		if n := calls.Inc(); n > 1 {
			e.violated(fmt.Errorf("AppendBatchAsync called done %d times for one batch", n))
			return
		}
		done(ids, err)
	})
}

// asyncOf returns the AsyncAppender under a WAL the env opened under
// "Async".
func asyncOf(t *testing.T, w walimpls.WALImpl) walimpls.AsyncAppender {
	aw, ok := w.(*asyncWAL)
	require.True(t, ok, "AsyncPipeline runs only under Async")
	return aw.aa
}

// testAsyncPipeline hands many batches over from one goroutine without
// waiting for their answers: they are stored in call order and read back
// so. Then batches in flight race the WAL's Close: each gets exactly one
// answer, what was answered stored is read back where its IDs say, and
// what was answered not stored is nowhere.
func testAsyncPipeline(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("pipeline"), 1, walimpls.ReadWrite)
	aa := asyncOf(t, w)
	const n = 300
	type answer struct {
		i int
		asyncAnswer
	}
	batches := make([][]message.Message, n)
	answers := make(chan answer, n)
	ctx, cancel := e.call()
	defer cancel()
	for i := range batches {
		batches[i] = simpleMessages(t, "pipeline-"+strconv.Itoa(i), 1+i%3)
		e.appendAsync(aa, ctx, batches[i], func(ids []message.ID, err error) {
			answers <- answer{i: i, asyncAnswer: asyncAnswer{ids: ids, err: err}}
		})
	}
	got := make([]asyncAnswer, n)
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	collect := func(what string) {
		timer.Reset(e.opts.waitTimeout)
		for range n {
			select {
			case a := <-answers:
				got[a.i] = a.asyncAnswer
			case <-timer.C:
				require.FailNowf(t, "watchdog", "not every batch %s was answered within %s", what, e.opts.waitTimeout)
			}
		}
	}
	collect("handed over back to back")
	var (
		wantIDs  []message.ID
		wantMsgs []message.Message
	)
	for i, a := range got {
		require.NoError(t, a.err, "batch %d", i)
		require.Len(t, a.ids, len(batches[i]), "batch %d", i)
		for j, id := range a.ids {
			if len(wantIDs) > 0 {
				require.Truef(t, wantIDs[len(wantIDs)-1].LT(id), "batch %d message %d: id %s does not follow %s: batches handed over one after the other are stored in call order",
					i, j, id, wantIDs[len(wantIDs)-1])
			}
			wantIDs = append(wantIDs, id)
		}
		wantMsgs = append(wantMsgs, batches[i]...)
	}
	checkSequence(t, wantIDs, wantMsgs, e.recv(e.read(w, cursor.All()), len(wantIDs)))

	// Batches in flight as the WAL closes.
	name := channelName("pipeline-close")
	w2 := e.open(o, name, 1, walimpls.ReadWrite)
	aa2 := asyncOf(t, w2)
	closed := make(chan error, 1)
	for i := range batches {
		if i == n/2 {
			go func() { closed <- w2.Close() }()
		}
		e.appendAsync(aa2, ctx, batches[i], func(ids []message.ID, err error) {
			answers <- answer{i: i, asyncAnswer: asyncAnswer{ids: ids, err: err}}
		})
	}
	collect("racing Close")
	select {
	case err := <-closed:
		require.NoError(t, err, "Close")
	case <-timer.C:
		require.FailNow(t, "watchdog", "Close with appends in flight did not return within %s", e.opts.waitTimeout)
	}
	stored := map[string]string{} // payload → ID it was answered with
	var last message.ID
	for i, a := range got {
		// With an error, the IDs are those of a stored prefix (all or
		// none on a backend with atomic batches).
		require.LessOrEqual(t, len(a.ids), len(batches[i]), "batch %d", i)
		if a.err == nil {
			require.Len(t, a.ids, len(batches[i]), "batch %d", i)
		}
		for j, id := range a.ids {
			require.Truef(t, last.IsZero() || last.LT(id), "batch %d: id %s does not follow %s", i, id, last)
			last = id
			stored[string(batches[i][j].Payload())] = id.String()
		}
	}
	r := e.open(o, name, 0, walimpls.ReadOnly)
	end, err := e.last(r)
	require.NoError(t, err)
	var read []message.Immutable
	if !end.IsZero() {
		s := e.read(r, cursor.All())
		for len(read) == 0 || read[len(read)-1].ID().LT(end) {
			read = append(read, e.recv(s, 1)...)
		}
	}
	found := map[string]bool{}
	for _, m := range read {
		p := string(m.Payload())
		found[p] = true
		if id, ok := stored[p]; ok {
			require.Equalf(t, id, m.ID().String(), "message %q is read at another ID than it was answered with", p)
		}
	}
	for p := range stored {
		require.Truef(t, found[p], "message %q was answered stored, and is not read back", p)
	}
	for i, a := range got {
		if a.err != nil && walimpls.NotStored(a.err) {
			for _, m := range batches[i][len(a.ids):] {
				require.Falsef(t, found[string(m.Payload())], "batch %d was answered not stored (%v), and is read back", i, a.err)
			}
		}
	}
}
