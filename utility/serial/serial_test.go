package serial

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Functions run in post order, also one posted by a running function, and
// Close runs what is queued before it returns.
func TestQueueRunsInPostOrder(t *testing.T) {
	q := New()
	var got []int // only the queue's goroutine touches it until Close returns
	record := func(i int) func() { return func() { got = append(got, i) } }
	for i := range 1000 {
		q.Post(record(i))
		if i == 500 {
			q.Post(func() { q.Post(record(-1)) })
		}
	}
	q.Close()
	require.Len(t, got, 1001)
	var want []int
	for i := range 1000 {
		want = append(want, i)
	}
	// -1 was posted by a function running after 500's: it comes after
	// everything posted before that function ran, wherever that was.
	at := -1
	for i, v := range got {
		if v == -1 {
			at = i
		}
	}
	require.Greater(t, at, 501)
	require.Equal(t, want, append(append([]int(nil), got[:at]...), got[at+1:]...))
}

// A queue nothing was posted to closes without a goroutine.
func TestQueueClosesUnused(t *testing.T) {
	New().Close()
}

// An idle queue holds no goroutine: the one that ran what was posted ends
// once the queue is empty, and the next Post starts another, in order.
func TestIdleQueueHoldsNoGoroutine(t *testing.T) {
	q := New()
	ran := make(chan int, 2)
	q.Post(func() { ran <- 1 })
	require.Equal(t, 1, <-ran)
	goleak.VerifyNone(t) // retries until the goroutine has ended
	q.Post(func() { ran <- 2 })
	q.Close()
	require.Equal(t, 2, <-ran)
}
