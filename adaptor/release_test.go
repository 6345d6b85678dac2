package adaptor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// TestLocalScannersNeedNoWatermark: a scanner of the writing WAL gets each
// acknowledged append without a watermark in the log (none is written
// here: the interval is an hour and Sync is never called), in timetick
// order, with resume positions that find everything after it.
func TestLocalScannersNeedNoWatermark(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	o := memOpener(t, c, memory.Config{})
	w := openWAL(t, o, "local-release", 1, Options{TimeTickInterval: time.Hour})
	s, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	defer s.Close()
	watermarks := testWatermarks(w)
	var acked []AppendResult
	for i := range 20 {
		r, err := w.Append(ctx, payload(i, 10))
		require.NoError(t, err)
		acked = append(acked, r)
		got := recvN(t, s, 1)[0] // before the next append begins
		require.Equal(t, r.ID, got.ID())
	}
	rs, err := w.AppendBatch(ctx, []message.Message{payload(100, 10), payload(101, 10)})
	require.NoError(t, err)
	got := recvN(t, s, 2)
	require.Equal(t, rs[0].ID, got[0].ID())
	require.Equal(t, rs[1].ID, got[1].ID())
	done := make(chan AppendResult, 1)
	w.AppendAsync(ctx, payload(102, 10), func(r AppendResult, err error) {
		require.NoError(t, err)
		done <- r
	})
	r := <-done
	require.Equal(t, r.ID, recvN(t, s, 1)[0].ID())
	require.Equal(t, watermarks, testWatermarks(w), "no watermark was written")

	// A resume from any delivered message's position finds what follows.
	s2, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.StartFrom(acked[5].ID)})
	require.NoError(t, err)
	defer s2.Close()
	first := recvN(t, s2, 1)[0]
	s3, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.StartFrom(first.LastConfirmed()),
		Filter: Filter{TimeTickAbove: acked[5].TimeTick}})
	require.NoError(t, err)
	defer s3.Close()
	require.Equal(t, acked[6].ID, recvN(t, s3, 1)[0].ID())
}

func testWatermarks(w *wal) uint64 {
	id := w.marks.lastWritten()
	seq, _ := message.SeqOf(memory.Name, id)
	return uint64(seq)
}

// TestLocalAndRemoteReadersAgree: appends that fail with every kind of
// outcome (stored but unacknowledged, retried, refused, abandoned on a
// cancelled context) must be delivered, or not, alike by a scanner of the
// writing WAL (local releases) and by a reader elsewhere (watermarks only).
func TestLocalAndRemoteReadersAgree(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	rng := rand.New(rand.NewPCG(11, testseed.Seed(t)))
	var rngMu sync.Mutex
	chance := func(p float64) bool {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Float64() < p
	}
	faulty := &faultyOpener{Opener: memOpener(t, c, memory.Config{}), quiet: true, fault: func() fault {
		switch {
		case chance(0.05):
			return storeThenLoseAck
		case chance(0.03):
			return storeThenFail
		case chance(0.05):
			return refuse
		case chance(0.03):
			return storeLate
		}
		return noFault
	}}
	w := openWAL(t, faulty, "agree", 1, Options{TimeTickInterval: time.Hour, WatermarkBytes: 1 << 20})
	local, err := w.Read(ctx, ReadOption{Name: "local"})
	require.NoError(t, err)
	defer local.Close()
	// The local scanner is read as it goes; appends of unknown outcome are
	// stored once it delivered messages above them (where no watermark
	// releases, since watermarks are rare here).
	var seen atomic.Uint64
	faulty.mu.Lock()
	faulty.seen = seen.Load
	faulty.mu.Unlock()
	type delivered struct {
		id  message.ID
		txt string
	}
	localGot := make(chan delivered, 1<<16)
	go func() {
		defer close(localGot)
		for m := range local.Chan() {
			tt, _ := m.TimeTick()
			if tt > seen.Load() {
				seen.Store(tt)
			}
			localGot <- delivered{m.ID(), fmt.Sprintf("%s@%s", m.Payload(), m.ID())}
		}
	}()
	ro := openWAL(t, memOpener(t, c, memory.Config{}), "agree", 0, Options{ReadOnly: true})
	remote, err := ro.Read(ctx, ReadOption{Name: "remote"})
	require.NoError(t, err)
	defer remote.Close()
	// Batch scanners deliver the same, read only at the end: they stall
	// and fall back to the backend on the way.
	localBatches, err := w.ReadBatches(ctx, ReadOption{Name: "local-batches"})
	require.NoError(t, err)
	defer localBatches.Close()
	remoteBatches, err := ro.ReadBatches(ctx, ReadOption{Name: "remote-batches"})
	require.NoError(t, err)
	defer remoteBatches.Close()

	faulty.setQuiet(false) // not while opening: a term-begin that fails fails the open
	var wg sync.WaitGroup
	for a := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				actx, cancel := context.WithCancel(ctx)
				if chance(0.02) {
					cancel() // abandoned at once
				}
				m := payload(a*1000+i, 1+i%200)
				if i%7 == 0 {
					_, _ = w.AppendBatch(actx, []message.Message{m, payload(a*1000+i+500, 20)})
				} else {
					_, _ = w.Append(actx, m)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	faulty.setQuiet(true)
	end, err := w.Append(ctx, payload(-1, 3))
	require.NoError(t, err)
	require.NoError(t, w.Sync(ctx))
	untilEnd := func(s walimpls.Scanner) []string {
		var out []string
		for {
			m := recvN(t, s, 1)[0]
			out = append(out, fmt.Sprintf("%s@%s", m.Payload(), m.ID()))
			if m.ID() == end.ID {
				return out
			}
		}
	}
	fromRemote := untilEnd(remote)
	var fromLocal []string
	for d := range localGot {
		fromLocal = append(fromLocal, d.txt)
		if d.id == end.ID {
			break
		}
	}
	require.Equal(t, fromRemote, fromLocal)
	// And a scanner that catches up from the backend once it is all there.
	later, err := w.Read(ctx, ReadOption{Name: "later"})
	require.NoError(t, err)
	defer later.Close()
	require.Equal(t, fromRemote, untilEnd(later))
	batchesUntilEnd := func(s walimpls.BatchScanner) []string {
		var out []string
		for {
			batch := recvBatch(t, s)
			for i, m := range batch {
				out = append(out, fmt.Sprintf("%s@%s", m.Payload(), m.ID()))
				batch[i] = message.Immutable{} // the slice is the reader's
				if m.ID() == end.ID {
					return out
				}
			}
		}
	}
	require.Equal(t, fromRemote, batchesUntilEnd(localBatches), "a batch scanner of the writer")
	require.Equal(t, fromRemote, batchesUntilEnd(remoteBatches), "a batch scanner of a reader")
	laterBatches, err := ro.ReadBatches(ctx, ReadOption{Name: "later-batches"})
	require.NoError(t, err)
	defer laterBatches.Close()
	require.Equal(t, fromRemote, batchesUntilEnd(laterBatches), "a batch scanner that catches up")
	t.Logf("%d messages delivered alike; %d faults injected", len(fromLocal), faulty.injected())
}

type fault int

const (
	noFault          fault = iota
	storeThenLoseAck       // stored, and a retryable error: the adaptor retries
	storeThenFail          // stored, and a final error of unknown outcome
	refuse                 // not stored, retryable
	storeLate              // a final error of unknown outcome, stored once readers went past it
)

// faultyOpener opens WALs whose appends fail as fault says.
type faultyOpener struct {
	walimpls.Opener
	fault func() fault
	mu    sync.Mutex
	quiet bool
	count int
	late  []lateAppend
	// seen is the highest timetick a local scanner delivered: a late
	// append is stored once it is above the append's.
	seen func() uint64
}

// lateAppend is stored once a local scanner delivered past it.
type lateAppend struct {
	msgs []message.Message
	tt   uint64
}

func (o *faultyOpener) setQuiet(quiet bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.quiet = quiet
}

func (o *faultyOpener) injected() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count
}

// takeLate returns the appends to store late, now: those a local scanner
// delivered past, and all of them once quiet.
func (o *faultyOpener) takeLate() [][]message.Message {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.late) == 0 {
		return nil
	}
	var now [][]message.Message
	kept := o.late[:0]
	seen := o.seen()
	for _, l := range o.late {
		if l.tt < seen || o.quiet {
			now = append(now, l.msgs)
			continue
		}
		kept = append(kept, l)
	}
	o.late = kept
	return now
}

func (o *faultyOpener) storeLater(msgs []message.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tt, _ := msgs[0].TimeTick()
	o.late = append(o.late, lateAppend{msgs: msgs, tt: tt})
}

func (o *faultyOpener) next() fault {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.quiet {
		return noFault
	}
	f := o.fault()
	if f != noFault {
		o.count++
	}
	return f
}

func (o *faultyOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	impl, err := o.Opener.Open(ctx, ch)
	if err != nil {
		return nil, err
	}
	return &faultyWAL{WALImpl: impl, o: o}, nil
}

type faultyWAL struct {
	walimpls.WALImpl
	o *faultyOpener
}

func (w *faultyWAL) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	for _, late := range w.o.takeLate() {
		_, _ = w.WALImpl.AppendBatch(context.Background(), late)
	}
	switch w.o.next() {
	case storeLate:
		w.o.storeLater(msgs)
		return nil, errors.Wrap(walimpls.ErrUnrecoverable, "faulty: the outcome is not known yet")
	case storeThenLoseAck:
		_, _ = w.WALImpl.AppendBatch(ctx, msgs)
		return nil, errors.New("faulty: the acknowledgement was lost")
	case storeThenFail:
		_, _ = w.WALImpl.AppendBatch(ctx, msgs)
		return nil, errors.Wrap(walimpls.ErrUnrecoverable, "faulty: failed after storing")
	case refuse:
		return nil, walimpls.MarkNotStored(errors.New("faulty: refused"))
	}
	return w.WALImpl.AppendBatch(ctx, msgs)
}

// TestLocalReleasesStopAtATakeover: a writer fenced while it appends must
// not release its scanners past the new owner's messages: they deliver
// what a reader elsewhere delivers.
func TestLocalReleasesStopAtATakeover(t *testing.T) {
	ctx := context.Background()
	for _, sameTerm := range []bool{false, true} {
		t.Run(fmt.Sprintf("same-term=%v", sameTerm), func(t *testing.T) {
			c := memory.NewCluster()
			opts := Options{TimeTickInterval: time.Hour}
			// Timeticks counted up one by one from far ahead of the clock:
			// the new owner's follow on from the last one stored, so the
			// old owner's appends that the takeover refused overlap them.
			w1 := openWAL(t, memOpener(t, c, memory.Config{}), "takeover", 1,
				Options{TimeTickInterval: time.Hour, Allocator: fixedAllocator(1 << 62)})
			local, err := w1.Read(ctx, ReadOption{Name: "local"})
			require.NoError(t, err)
			defer local.Close()
			var wg sync.WaitGroup
			stop := make(chan struct{})
			opened := make(chan struct{}) // w2 is open
			for a := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						if i == 1000 {
							// Bound the log: an appender that got this far
							// before the takeover waits for it, then finds
							// itself fenced. Readers must read it all.
							select {
							case <-opened:
							case <-stop:
								return
							}
						}
						select {
						case <-stop:
							return
						default:
						}
						if _, err := w1.Append(ctx, payload(a*100000+i, 8)); err != nil {
							return
						}
					}
				}()
			}
			// Let the old owner get going before the takeover.
			recvN(t, local, 50)
			term := int64(2)
			if sameTerm {
				term = 1
			}
			w2 := openWAL(t, memOpener(t, c, memory.Config{}), "takeover", term, opts)
			close(opened)
			var end AppendResult
			for i := range 200 {
				end, err = w2.Append(ctx, payload(-i, 8))
				require.NoError(t, err)
			}
			close(stop)
			wg.Wait()
			require.NoError(t, w2.Sync(ctx))
			// The new owner's messages reach w1's scanner through its tail
			// reader; a remote reader sees the same log.
			ro := openWAL(t, memOpener(t, c, memory.Config{}), "takeover", 0, Options{ReadOnly: true})
			remote, err := ro.Read(ctx, ReadOption{Name: "remote"})
			require.NoError(t, err)
			defer remote.Close()
			untilEnd := func(s walimpls.Scanner, skip int) []string {
				var out []string
				for {
					m := recvN(t, s, 1)[0]
					out = append(out, fmt.Sprintf("%s@%s", m.Payload(), m.ID()))
					if m.ID() == end.ID {
						return out[skip:]
					}
				}
			}
			fromRemote := untilEnd(remote, 0)
			fromLocal := untilEnd(local, 0)
			require.Equal(t, fromRemote[50:], fromLocal)
		})
	}
}

// TestRetriedAppendReportsTheDeliveredCopy: an attempt stored but not
// acknowledged, then a retry that stored a second copy: the result names
// the copy readers deliver, not the retry's.
func TestRetriedAppendReportsTheDeliveredCopy(t *testing.T) {
	ctx := context.Background()
	c := memory.NewCluster()
	var once atomic.Bool
	faulty := &faultyOpener{Opener: memOpener(t, c, memory.Config{}), quiet: true, seen: func() uint64 { return 0 }, fault: func() fault {
		if once.CompareAndSwap(false, true) {
			return storeThenLoseAck
		}
		return noFault
	}}
	w := openWAL(t, faulty, "retried", 1, Options{TimeTickInterval: time.Hour})
	s, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	defer s.Close()
	faulty.setQuiet(false)
	r, err := w.Append(ctx, payload(1, 10))
	require.NoError(t, err)
	faulty.setQuiet(true)
	require.EqualValues(t, 1, faulty.injected())
	after, err := w.Append(ctx, payload(2, 10))
	require.NoError(t, err)
	got := recvN(t, s, 2)
	require.Equal(t, r.ID, got[0].ID(), "the delivered copy")
	require.Equal(t, after.ID, got[1].ID())
	last, err := w.impl.Last(ctx)
	require.NoError(t, err)
	require.True(t, r.ID.LT(last), "two copies were stored")
}
