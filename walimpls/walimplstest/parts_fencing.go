package walimplstest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

func testFencing(t *testing.T, e *env) {
	if !e.caps.Fencing {
		t.Skip("backend declares Capabilities.Fencing=false: it cannot stop a lower-term writer; " +
			"readers are protected by the adaptor's log-level fence instead")
	}
	nodeA, nodeB := e.opener(), e.opener()
	name := channelName("fence")
	wa := e.open(nodeA, name, 1, walimpls.ReadWrite)

	var (
		mu     sync.Mutex
		ackedA []message.ID
	)
	for _, m := range simpleMessages(t, "A", 5) {
		m, _ = m.WithReserved("_writer_test", "A") // reserved keys travel too
		id, err := wa.Append(e.ctx, m)
		require.NoError(t, err)
		ackedA = append(ackedA, id)
	}

	// Four appenders keep writing as node B takes over. An append that
	// starts after B's Open returned must not be acknowledged.
	var (
		bOpened    atomic.Bool
		violations = make(chan string, 100)
		fencedAt   = make(chan time.Time, 4)
		wg         sync.WaitGroup
		stop       = make(chan struct{})
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := mustMessage(t, []byte(fmt.Sprintf("A-%d-%d", g, i)), map[string]string{"writer": "A"})
				startedAfterB := bOpened.Load()
				id, err := wa.Append(e.ctx, m)
				switch {
				case err == nil && startedAfterB:
					violations <- fmt.Sprintf("append of node A started after node B's Open returned and was acknowledged as %s", id)
					return
				case err == nil:
					mu.Lock()
					ackedA = append(ackedA, id)
					mu.Unlock()
				case errors.Is(err, walimpls.ErrFenced):
					fencedAt <- time.Now()
					return
				default:
					// A backend may fail an append in flight during the
					// takeover for another reason; it must still end fenced.
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	wb := e.open(nodeB, name, 2, walimpls.ReadWrite)
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

	for i := range 3 {
		_, err := wa.Append(e.ctx, mustMessage(t, []byte("late"), nil))
		require.ErrorIsf(t, err, walimpls.ErrFenced, "append %d of the fenced node A", i)
	}
	_, err := nodeA.Open(e.ctx, walimpls.Channel{Name: name, Term: 1})
	require.ErrorIs(t, err, walimpls.ErrFenced, "reopen at the lower term 1 after term 2")

	msgsB := simpleMessages(t, "B", 5)
	idsB := e.appendAll(wb, msgsB)

	// Every acknowledged message of A is read back, before every message of
	// B; nothing of A comes after B's first.
	reader := e.open(e.opener(), name, 0, walimpls.ReadOnly)
	s := e.read(reader, walimpls.DeliverAll())
	mu.Lock()
	want := map[string]bool{}
	for _, id := range ackedA {
		want[id.Marshal()] = true
	}
	mu.Unlock()
	sawB := 0
	timer := time.NewTimer(e.opts.waitTimeout)
	defer timer.Stop()
	for sawB < len(idsB) {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "scanner ended: %v", s.Error())
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
}
