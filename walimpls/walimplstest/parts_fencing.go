package walimplstest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

const noFencingSkip = "backend declares Capabilities.Fencing=false: it cannot stop an earlier writer; " +
	"readers are protected by the adaptor's log-level fence instead"

// testFencing checks a takeover by a higher term on another node.
func testFencing(t *testing.T, e *env) {
	if !e.caps.Fencing {
		t.Skip(noFencingSkip)
	}
	e.checkTakeover(1, 2)
}

// testSameTermTakeover checks the same-term rule: a later ReadWrite open of
// the same term on another node fences the earlier writer (one term has one
// writer), and a third open of that term takes the channel back.
func testSameTermTakeover(t *testing.T, e *env) {
	if !e.caps.Fencing {
		t.Skip(noFencingSkip)
	}
	e.checkTakeover(3, 3)
}

// checkTakeover opens the channel at termA on node A, keeps four appenders
// writing on it, opens it at termB ≥ termA on node B while they run, and
// checks that A is fenced for good (appends and truncates), that nothing A
// started after B's Open returned was acknowledged, and that every
// acknowledged message of A is read back, before every message of B.
func (e *env) checkTakeover(termA, termB int64) {
	t := e.t
	nodeA, nodeB := e.opener(), e.opener()
	name := channelName(fmt.Sprintf("fence-%d-%d", termA, termB))
	wa := e.open(nodeA, name, termA, walimpls.ReadWrite)

	var (
		mu     sync.Mutex
		ackedA []message.ID
	)
	for _, m := range simpleMessages(t, "A", 5) {
		m, _ = m.WithReserved("_writer_test", "A") // reserved keys travel too
		id, err := e.appendOne(wa, m)
		require.NoError(t, err)
		ackedA = append(ackedA, id)
	}

	// Four appenders keep writing as node B takes over. An append that
	// starts after B's Open returned must not be acknowledged.
	var (
		bOpened    atomic.Bool
		violations = make(chan string, 100)
		fencedAt   = make(chan time.Time, 4)
		running    sync.WaitGroup // each appender had an append acknowledged
		wg         sync.WaitGroup
		stop       = make(chan struct{})
	)
	running.Add(4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			defer once.Do(running.Done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := mustMessage(t, []byte(fmt.Sprintf("A-%d-%d", g, i)), map[string]string{"writer": "A"})
				startedAfterB := bOpened.Load()
				ctx, cancel := e.call()
				id, err := walimpls.Append(ctx, wa, m)
				cancel()
				switch {
				case err == nil && startedAfterB:
					violations <- fmt.Sprintf("append of node A started after node B's Open returned and was acknowledged as %s", id)
					return
				case err == nil:
					mu.Lock()
					ackedA = append(ackedA, id)
					mu.Unlock()
					once.Do(running.Done)
				case errors.Is(err, walimpls.ErrFenced):
					fencedAt <- time.Now()
					return
				default:
					// A backend may fail an append in flight during the
					// takeover for another reason; it must still end fenced.
					// Pace the retries.
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	running.Wait()
	wb := e.open(nodeB, name, termB, walimpls.ReadWrite)
	bOpened.Store(true)
	openedAt := time.Now()

	appendersDone := make(chan struct{})
	go func() { wg.Wait(); close(appendersDone) }()
	select {
	case <-appendersDone:
	case <-time.After(e.opts.waitTimeout):
		close(stop)
		<-appendersDone
		require.FailNow(t, "node A's appenders were not fenced in time")
	}
	close(violations)
	for v := range violations {
		require.FailNow(t, v)
	}
	close(fencedAt)
	for at := range fencedAt {
		t.Logf("node A appender fenced %s after node B's open", at.Sub(openedAt).Round(time.Millisecond))
	}

	// Fenced for good: appends and truncates fail and change nothing;
	// reading still works.
	for i := range 3 {
		_, err := e.appendOne(wa, mustMessage(t, []byte("late"), nil))
		require.ErrorIsf(t, err, walimpls.ErrFenced, "append %d of the fenced node A", i)
		require.Truef(t, walimpls.NotStored(err), "append %d of a WAL known to be fenced must be NotStored: %v", i, err)
		var fe *walimpls.FencedError
		if errors.As(err, &fe) && fe.CurrentTerm != 0 {
			require.GreaterOrEqualf(t, fe.CurrentTerm, termB, "FencedError.CurrentTerm of the fenced node A: %v", err)
		}
	}
	_, err := within(e, "AppendBatch", func(ctx context.Context) ([]message.ID, error) {
		return wa.AppendBatch(ctx, simpleMessages(t, "late-batch", 2))
	})
	require.ErrorIs(t, err, walimpls.ErrFenced, "a batch of the fenced node A")
	mu.Lock()
	lastA := ackedA[len(ackedA)-1]
	mu.Unlock()
	require.ErrorIs(t, e.truncate(wa, lastA), walimpls.ErrFenced, "truncate by the fenced node A")
	_, err = e.last(wa)
	require.NoError(t, err, "Last of a fenced WAL")
	if termA < termB {
		_, err := e.tryOpen(nodeA, name, termA, walimpls.ReadWrite)
		require.ErrorIsf(t, err, walimpls.ErrFenced, "reopen at the lower term %d after term %d", termA, termB)
	}

	msgsB := simpleMessages(t, "B", 5)
	idsB := e.appendAll(wb, msgsB)

	// Every acknowledged message of A is read back, before every message of
	// B; nothing of A comes after B's first. The fenced Truncate removed
	// nothing.
	reader := e.open(e.opener(), name, 0, walimpls.ReadOnly)
	s := e.read(reader, cursor.All())
	mu.Lock()
	want := map[string]bool{}
	for _, id := range ackedA {
		want[id.Marshal()] = true
	}
	firstA := ackedA[0]
	mu.Unlock()
	sawB, n := 0, 0
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	for sawB < len(idsB) {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended: %v", s.Error())
			if n == 0 {
				require.Truef(t, m.ID().EQ(firstA), "the log starts at %s, want node A's first message %s: a fenced Truncate removed messages", m.ID(), firstA)
			}
			n++
			tag, _ := m.Properties().Get("tag")
			if tag == "B" {
				require.Truef(t, m.ID().EQ(idsB[sawB]), "message %d of B: want %s, got %s", sawB, idsB[sawB], m.ID())
				sawB++
				continue
			}
			require.Zerof(t, sawB, "a message of the fenced node A (%s) was read after node B's messages", m.ID())
			delete(want, m.ID().Marshal())
		case <-timer.C:
			require.FailNow(t, "watchdog: reading the fenced channel back")
		}
	}
	require.Emptyf(t, want, "acknowledged messages of node A were lost: %v", want)
	e.quiet(s)

	if termA == termB {
		// A third open of the same term, on node A again, takes over from B.
		wc := e.open(nodeA, name, termB, walimpls.ReadWrite)
		_, err := e.appendOne(wb, mustMessage(t, []byte("B after C"), nil))
		require.ErrorIs(t, err, walimpls.ErrFenced, "node B after a later open of its own term")
		e.appendAll(wc, simpleMessages(t, "C", 2))
	}
}

// testRefusedOpen checks that an open below the channel's term fails with
// ErrFenced and changes nothing: the owner keeps writing, the log is
// unchanged.
func testRefusedOpen(t *testing.T, e *env) {
	if !e.caps.Fencing {
		t.Skip(noFencingSkip)
	}
	nodeA, nodeB := e.opener(), e.opener()
	name := channelName("refused")
	wa := e.open(nodeA, name, 4, walimpls.ReadWrite)
	msgs := simpleMessages(t, "own", 4)
	ids := e.appendAll(wa, msgs[:2])
	for _, term := range []int64{0, 1, 3} {
		w, err := e.tryOpen(nodeB, name, term, walimpls.ReadWrite)
		require.ErrorIsf(t, err, walimpls.ErrFenced, "open at term %d below the channel's term 4", term)
		require.Nil(t, w)
		var fe *walimpls.FencedError
		if errors.As(err, &fe) {
			require.Equal(t, term, fe.Term, "FencedError.Term is the refused open's term")
			if fe.CurrentTerm != 0 {
				require.EqualValues(t, 4, fe.CurrentTerm, "FencedError.CurrentTerm")
			}
		}
	}
	ids = append(ids, e.appendAll(wa, msgs[2:])...) // the owner was not disturbed
	last, err := e.last(wa)
	require.NoError(t, err)
	require.Truef(t, last.EQ(ids[3]), "Last after refused opens: want %s, got %s", ids[3], last)
	s := e.read(wa, cursor.All())
	checkSequence(t, ids, msgs, e.recv(s, 4))
	e.quiet(s)
}
