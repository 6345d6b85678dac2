package walimplstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls"
)

func testScannerContract(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("scan"), 1, walimpls.ReadWrite)
	e.appendAll(w, simpleMessages(t, "scan", 5))

	// Close unblocks a consumer waiting on an idle tail.
	s := e.read(w, cursor.Latest())
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range s.Chan() {
		}
	}()
	e.closeScanner(s)
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		require.FailNow(t, "watchdog: Close did not close Chan")
	}
	e.waitClosed(s)
	require.NoError(t, s.Error(), "Error after a user Close")
	e.closeScanner(s) // a second Close

	// Close in the middle of a backlog.
	s = e.read(w, cursor.All())
	e.recv(s, 1)
	e.closeScanner(s)
	e.waitClosed(s)
	require.NoError(t, s.Error())

	// Twenty scanners opened and closed concurrently leave no goroutine
	// behind. One round first, so that what a backend starts once per WAL
	// is already running when the snapshot is taken.
	scanRound(t, e, w, 1)
	snapshot := goleak.IgnoreCurrent()
	scanRound(t, e, w, 20)
	// A closed scanner's connections end asynchronously on the far side too
	// (an in-process broker's per-connection goroutines notice the close
	// when its loop gets to them), so a loaded machine gets a few seconds
	// before a goroutine counts as left behind.
	err := goleak.Find(snapshot)
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		err = goleak.Find(snapshot)
	}
	require.NoError(t, err, "goroutines left behind by closed scanners")

	// Closing the WAL ends its scanners.
	s = e.read(w, cursor.Latest())
	require.NoError(t, e.do("WAL.Close", func(context.Context) error { return w.Close() }))
	e.waitClosed(s)
	if err := s.Error(); err != nil {
		require.ErrorIs(t, err, walimpls.ErrClosed, "a scanner ended by its WAL's Close")
	}
}

// scanRound opens n scanners at once, lets each read one message (or
// nothing, tailing), and closes them all.
func scanRound(t *testing.T, e *env, w walimpls.WALImpl, n int) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := cursor.All()
			if i%2 == 1 {
				p = cursor.Latest()
			}
			ctx, cancel := e.call()
			s, err := w.Read(ctx, walimpls.ReadOption{DeliverPolicy: p})
			cancel()
			if err != nil {
				errs <- err
				return
			}
			if p.IsAll() {
				<-s.Chan()
			}
			errs <- s.Close()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.opts.waitTimeout):
		require.FailNowf(t, "watchdog", "%d scanners did not all read and close within %s", n, e.opts.waitTimeout)
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// testScannerOutlivesReadContext checks that a scanner lives on after the
// context of its Read ends: that context bounds the call only.
func testScannerOutlivesReadContext(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("readctx"), 1, walimpls.ReadWrite)
	msgs := simpleMessages(t, "rc", 4)
	ids := e.appendAll(w, msgs[:2])
	var scanners []walimpls.Scanner
	for _, p := range []cursor.Policy{cursor.All(), cursor.Latest(), cursor.StartAfter(ids[1])} {
		ctx, cancel := context.WithCancel(e.ctx)
		s, err := within(e, "Read", func(context.Context) (walimpls.Scanner, error) {
			return w.Read(ctx, walimpls.ReadOption{DeliverPolicy: p})
		})
		require.NoError(t, err)
		e.closeLater("a scanner", s.Close)
		cancel()
		scanners = append(scanners, s)
	}
	checkSequence(t, ids, msgs[:2], e.recv(scanners[0], 2))
	ids = append(ids, e.appendAll(w, msgs[2:])...)
	checkSequence(t, ids[2:], msgs[2:], e.recv(scanners[0], 2))
	checkSequence(t, ids[2:], msgs[2:], e.recv(scanners[1], 2))
	checkSequence(t, ids[2:], msgs[2:], e.recv(scanners[2], 2))
}
