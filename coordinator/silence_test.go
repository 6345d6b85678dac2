package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cluster"
)

func TestHeartbeatFor(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{time.Second, 25 * time.Millisecond},
		{500 * time.Millisecond, 20 * time.Millisecond}, // the floor
		{6 * time.Second, 150 * time.Millisecond},
		{10 * time.Second, 250 * time.Millisecond},
		{time.Minute, time.Second}, // the ceiling
	} {
		require.Equal(t, tc.want, heartbeatFor(tc.ttl), "ttl %s", tc.ttl)
		require.GreaterOrEqual(t, heartbeatFor(tc.ttl), cluster.MinHeartbeat)
	}
}

// TestSilenceSteps drives silence's judgement step by step, times from t0:
// a node at a 1 s TTL asked for 25 ms heartbeats, limit 1.025 s.
func TestSilenceSteps(t *testing.T) {
	t0 := epoch
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := newSilence(time.Second, 25*time.Millisecond)
	require.True(t, s.timed())

	// A connection at 0: measured from it, not from earlier.
	s.connected(at(0))
	require.Equal(t, at(1025), s.due())
	s.answered(25 * time.Millisecond)
	require.Equal(t, at(1025), s.due())

	// Heartbeats push the due time; the socket found empty before it is
	// no silence.
	require.False(t, s.hear(at(20)))
	require.Equal(t, at(1045), s.due())
	require.False(t, s.empty(at(1044)))

	// Empty at the due time: a silence of the limit, to confirm.
	require.True(t, s.empty(at(1045)))
	require.Equal(t, 1025*time.Millisecond, s.silentFor(at(1045)))

	// etcd says the lease lives for 1 s more: judged again then, not before.
	s.settle(at(1045), time.Second)
	require.Equal(t, at(2045), s.due())
	require.False(t, s.empty(at(2000)))
	require.True(t, s.empty(at(2045)))

	// The verdict: nothing more to judge until the node speaks.
	s.settle(at(2045), 0)
	require.True(t, s.due().IsZero())
	require.False(t, s.empty(at(9000)))
	// A new connection after it does not end the silence: only a byte does.
	s.connected(at(3000))
	require.True(t, s.due().IsZero())
	require.True(t, s.hear(at(3010)), "the first byte after a verdict ends the silence")
	require.Equal(t, at(4035), s.due())
	require.False(t, s.hear(at(3020)))

	// A byte read late (this process was stalled) counts when it is read:
	// never earlier than a byte already heard.
	s.hear(at(2000))
	require.Equal(t, at(4045), s.due())
}

// A node that does not heartbeat (its answer has no interval), or does not
// publish its TTL, is not timed: only its lease is.
func TestSilenceUntimed(t *testing.T) {
	s := newSilence(0, 0)
	require.False(t, s.timed())
	s.connected(epoch)
	require.True(t, s.due().IsZero())
	require.False(t, s.empty(epoch.Add(time.Hour)))

	s = newSilence(time.Second, 25*time.Millisecond)
	s.connected(epoch)
	s.answered(0)
	require.False(t, s.timed())
	require.True(t, s.due().IsZero())
	s.hear(epoch.Add(time.Millisecond))
	require.True(t, s.due().IsZero())
	require.False(t, s.empty(epoch.Add(time.Hour)))

	// A node that heartbeats slower than asked: the limit grows with it.
	s = newSilence(time.Second, 25*time.Millisecond)
	s.connected(epoch)
	s.answered(100 * time.Millisecond)
	require.Equal(t, epoch.Add(1100*time.Millisecond), s.due())
}
