package walimplstest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/walimpls"
)

func testScannerContract(t *testing.T, e *env) {
	o := e.opener()
	w := e.open(o, channelName("scan"), 1, walimpls.ReadWrite)
	e.appendAll(w, simpleMessages(t, "scan", 5))

	// Close unblocks a consumer waiting on an idle tail.
	s, err := w.Read(e.ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverLatest()})
	require.NoError(t, err)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range s.Chan() {
		}
	}()
	require.NoError(t, s.Close())
	select {
	case <-drained:
	case <-e.ctx.Done():
		require.FailNow(t, "Close did not close Chan")
	}
	e.waitClosed(s)
	require.NoError(t, s.Error(), "Error after a user Close")
	require.NoError(t, s.Close(), "second Close")

	// Close in the middle of a backlog.
	s, err = w.Read(e.ctx, walimpls.ReadOption{DeliverPolicy: walimpls.DeliverAll()})
	require.NoError(t, err)
	e.recv(s, 1)
	require.NoError(t, s.Close())
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
	err = goleak.Find(snapshot)
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		err = goleak.Find(snapshot)
	}
	require.NoError(t, err, "goroutines left behind by closed scanners")

	// Closing the WAL ends its scanners.
	s = e.read(w, walimpls.DeliverLatest())
	require.NoError(t, w.Close())
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
			p := walimpls.DeliverAll()
			if i%2 == 1 {
				p = walimpls.DeliverLatest()
			}
			s, err := w.Read(e.ctx, walimpls.ReadOption{DeliverPolicy: p})
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
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
