package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/utility/backoff"
)

func TestDelayIsCappedExponential(t *testing.T) {
	c := backoff.Config{Initial: time.Millisecond, Max: 5 * time.Millisecond, NoJitter: true}
	var got []time.Duration
	for i := range 6 {
		got = append(got, c.Delay(i))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{ms, 2 * ms, 4 * ms, 5 * ms, 5 * ms, 5 * ms}, got)
	require.Equal(t, 10*ms, backoff.Config{NoJitter: true}.Delay(0))
	j := backoff.Config{Initial: 100 * ms}.Delay(0)
	require.True(t, j >= 80*ms && j <= 120*ms, "jitter stays within ±20%%: %s", j)
}

func TestWaitHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, backoff.Config{Initial: time.Hour}.Wait(ctx, 0), context.Canceled)
	require.NoError(t, backoff.Config{Initial: time.Microsecond}.Wait(context.Background(), 0))
}
