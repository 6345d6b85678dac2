package adaptor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/utility/lifecycle"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// fakeBackend is a backend scanner that delivers msgs, then fails with
// fail, or, when fail is nil, waits until it is closed.
type fakeBackend struct {
	*lifecycle.Run
	out chan message.Immutable
}

func newFakeBackend(msgs []message.Immutable, fail error) *fakeBackend {
	b := &fakeBackend{Run: lifecycle.NewRun(), out: make(chan message.Immutable)}
	go func() {
		for _, m := range msgs {
			select {
			case b.out <- m:
			case <-b.Stopping():
			}
		}
		if fail == nil {
			<-b.Stopping()
		}
		close(b.out)
		b.End(fail)
	}()
	return b
}

func (b *fakeBackend) Chan() <-chan message.Immutable { return b.out }

// viewOf is a scanner's view of a WAL that only has a backend: nothing in
// the tail cache, no local releases, no truncation.
func viewOf(backend walimpls.Scanner, live *lifecycle.Group[*scanner], hooks scanHooks) walView {
	return walView{
		read: func(context.Context, walimpls.ReadOption) (*backendScan, error) {
			return &backendScan{scanLife: backend, one: backend}, nil
		},
		cache: newTailCache(1 << 20), m: newWALMetrics(nil, "view"), budget: 1 << 20,
		term: 1, termBefore: func(message.ID) int64 { return 0 }, truncatedBelow: func(message.ID) bool { return false },
		live: live, hooks: hooks,
	}
}

// The walimpls.Scanner contract as the scanner's Run keeps it: Close waits and is
// idempotent, Done closes before Chan, and Error is nil after Close,
// ErrClosed when the WAL closed it, or the failure. A scanner that failed
// ends with its failure even when it is stopped (closed, or its WAL
// closed) while it still hands over what it released before failing.
func TestScannerErrorContract(t *testing.T) {
	failure := errors.New("backend failed")
	walClosed := errors.New("wal closed")
	data := message.NewImmutable(message.Message{}.Stamp(message.KindData, 1, 10), message.NewSeqID("fake", 1))
	watermark := message.NewImmutable(message.Message{}.WithKind(message.KindTimeTick).WithTerm(1).WithTimeTick(20),
		message.NewSeqID("fake", 2))
	for name, tc := range map[string]struct {
		fail error
		read bool // the reader takes the released message
		end  func(s *scanner, live *lifecycle.Group[*scanner])
		want error
	}{
		"closed":     {end: func(s *scanner, _ *lifecycle.Group[*scanner]) { require.NoError(t, s.Close()) }},
		"wal closed": {end: func(_ *scanner, live *lifecycle.Group[*scanner]) { live.StopAll(walClosed) }, want: walClosed},
		"failed":     {fail: failure, read: true, end: func(*scanner, *lifecycle.Group[*scanner]) {}, want: failure},
		"failed, then closed while delivering": {fail: failure,
			end: func(s *scanner, _ *lifecycle.Group[*scanner]) { require.NoError(t, s.Close()) }, want: failure},
		"failed, then wal closed while delivering": {fail: failure,
			end: func(_ *scanner, live *lifecycle.Group[*scanner]) { live.StopAll(walClosed) }, want: failure},
	} {
		t.Run(name, func(t *testing.T) {
			var live lifecycle.Group[*scanner]
			stalled := make(chan struct{}, 1)
			hooks := scanHooks{stalled: func(bool, int64) {
				select {
				case stalled <- struct{}{}:
				default:
				}
			}}
			sc, err := newScanner(context.Background(), viewOf(newFakeBackend([]message.Immutable{data, watermark}, tc.fail), &live, hooks), ReadOption{}, false)
			require.NoError(t, err)
			require.True(t, live.Add(sc))
			go sc.run()
			if tc.read {
				require.Equal(t, data.ID(), recvN(t, sc, 1)[0].ID())
			} else if tc.fail != nil {
				// Not read, the released message holds a failed scanner in
				// waitDelivered: the hook says it got there.
				select {
				case <-stalled:
				case <-time.After(30 * time.Second):
					require.FailNow(t, "watchdog: the failed scanner never waited for its reader")
				}
			}
			tc.end(sc, &live)
			select {
			case <-sc.Done():
			case <-time.After(30 * time.Second):
				require.FailNow(t, "watchdog: the scanner never ended")
			}
			require.Equal(t, tc.want, sc.Error())
			for range sc.Chan() { // closed after Done
			}
			require.NoError(t, sc.Close(), "Close is idempotent")
			require.NoError(t, sc.Close())
			require.Equal(t, tc.want, sc.Error(), "a Close after the end changes nothing")
			require.Zero(t, live.Len(), "an ended scanner left its WAL's set")
		})
	}
}

// A WAL's Close stops its scanners, waits for them, and they end with
// ErrClosed; none starts after.
func TestScannerEndsWhenItsWALCloses(t *testing.T) {
	w := openWAL(t, memOpener(t, memory.NewCluster(), memory.Config{}), "scanner-close", 1, Options{
		TimeTickInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	running, err := w.Read(ctx, ReadOption{DeliverPolicy: cursor.Latest()})
	require.NoError(t, err)
	closed, err := w.Read(ctx, ReadOption{})
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	require.NoError(t, w.Close())
	select {
	case <-running.Done():
	default:
		require.FailNow(t, "the WAL's Close returned before its scanner ended")
	}
	require.ErrorIs(t, running.Error(), walimpls.ErrClosed)
	for range running.Chan() {
	}
	require.NoError(t, running.Close())
	require.ErrorIs(t, running.Error(), walimpls.ErrClosed, "a Close after the end changes nothing")
	require.NoError(t, closed.Error(), "closed before its WAL")
	_, err = w.Read(ctx, ReadOption{})
	require.ErrorIs(t, err, walimpls.ErrClosed)
}
