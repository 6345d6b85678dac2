package walmanager_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/walmanager"
)

// The WAL the manager hands out passes the adaptor's AsyncAnswerer on, so
// that a wrapper's refused appends (a vchannel view's) are called back on
// the WAL's callback goroutine, not on the caller's.
func TestHandedOutWALAnswersOnItsCallbackGoroutine(t *testing.T) {
	m, _ := deleteStack(t, nil)
	ch := walmanager.Channel{Name: "answers", Term: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Open(ctx, ch))
	w, err := m.GetAvailableWAL(ch)
	require.NoError(t, err)
	_, ok := w.(adaptor.AsyncAnswerer)
	require.True(t, ok, "the handed-out WAL hides AsyncAnswerer")

	caller := goroutineID()
	answered := make(chan string, 1)
	adaptor.AnswerAsync(w, func(adaptor.AppendResult, error) { answered <- goroutineID() }, adaptor.AppendResult{}, nil)
	select {
	case g := <-answered:
		require.NotEqual(t, caller, g, "called back on the caller's goroutine")
	case <-ctx.Done():
		require.FailNow(t, "watchdog", "no callback")
	}
}

// goroutineID is the running goroutine's number, from its stack header
// ("goroutine 42 [running]:").
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}
