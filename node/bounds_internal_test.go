package node

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// A peer's failed handshakes are a bucket: a burst of four seconds'
// worth, then rate a second; a quiet peer gets its tokens back, and its
// entry goes.
func TestHandshakeBudget(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Unix(0, 0))
	h := newHandshakeBudget(2, clock)
	for range 7 {
		h.failed("10.0.0.1")
	}
	require.False(t, h.exhausted("10.0.0.1"), "one token left of the burst of 8")
	h.failed("10.0.0.1")
	require.True(t, h.exhausted("10.0.0.1"))
	require.False(t, h.exhausted("10.0.0.2"), "another peer")
	clock.Advance(250 * time.Millisecond)
	require.True(t, h.exhausted("10.0.0.1"), "half a token back")
	clock.Advance(250 * time.Millisecond)
	require.False(t, h.exhausted("10.0.0.1"), "a token back: rate 2 a second")
	clock.Advance(time.Hour)
	require.False(t, h.exhausted("10.0.0.1"))
	require.Empty(t, h.peers, "a full bucket is no entry")
}

// The limiter lets one line per key through per interval, says how many
// it suppressed on the next line or when the interval is over, and shares
// one key per reason once its table is full.
func TestRefusalLimiter(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Unix(0, 0))
	suppressed := prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})
	l := newRefusalLimiter(time.Second, clock, suppressed)
	l.maxKeys = 2
	a := refusalKey{"10.0.0.1", "no_grant"}
	write, prior := l.admit(a, clock.Now())
	require.True(t, write)
	require.Zero(t, prior)
	for range 3 {
		write, _ = l.admit(a, clock.Now())
		require.False(t, write)
	}
	require.Empty(t, l.expired(clock.Now(), false), "the interval is not over")
	clock.Advance(time.Second)
	write, prior = l.admit(a, clock.Now())
	require.True(t, write)
	require.Equal(t, 3, prior, "said on the next line")
	l.admit(a, clock.Now())
	clock.Advance(time.Second)
	require.Equal(t, map[refusalKey]int{a: 1}, l.expired(clock.Now(), false), "or when the interval is over")
	require.Empty(t, l.keys)

	l.admit(refusalKey{"10.0.0.1", "r"}, clock.Now())
	l.admit(refusalKey{"10.0.0.2", "r"}, clock.Now())
	write, _ = l.admit(refusalKey{"10.0.0.3", "r"}, clock.Now())
	require.True(t, write, "a new key beyond the table's size: the shared one, first line")
	write, _ = l.admit(refusalKey{"10.0.0.4", "r"}, clock.Now())
	require.False(t, write, "the shared key's interval")
	require.Equal(t, map[refusalKey]int{{"*", "r"}: 1}, l.expired(clock.Now(), true))
	require.EqualValues(t, 5, testutil.ToFloat64(suppressed))
}

// A peer is an IPv4 address, or an IPv6 address's /64.
func TestPeerHost(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.1:5555":               "10.0.0.1",
		"[::ffff:10.0.0.1]:5555":      "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:5555": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":    "2001:db8:1:2::/64",
		"[fe80::1%eth0]:1":            "fe80::/64",
		"pipe":                        "pipe",
		"127.0.0.1":                   "127.0.0.1",
	} {
		require.Equal(t, want, peerHost(addr), addr)
	}
}
