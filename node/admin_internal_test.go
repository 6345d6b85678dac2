package node

import (
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/walmanager"
)

// judge, step by step: each rule and what it says.
func TestJudge(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	const stall = 10 * time.Second
	avail := walmanager.StateAvailable.String()
	cases := []struct {
		name   string
		in     judgeInput
		health string
		reason string // a part of it
	}{
		{"idle and available", judgeInput{state: avail, term: 2}, healthHealthy, ""},
		{"open failed", judgeInput{state: walmanager.StateFailed.String(), term: 2, stateErr: errors.New("disk full")},
			healthFailed, "open failing: disk full"},
		{"fenced while assigned here", judgeInput{state: walmanager.StateUnavailable.String(), term: 2, stateErr: errors.New("term 2 fenced by 3")},
			healthFailed, "fenced by 3"},
		{"fenced after moving away", judgeInput{state: walmanager.StateUnavailable.String(), movedTo: "n2"},
			healthHealthy, "assigned to node n2 now"},
		{"opening, young", judgeInput{state: walmanager.StateOpening.String(), term: 2, assignedSince: now.Add(-time.Second)},
			healthHealthy, "opening since"},
		{"opening, overdue", judgeInput{state: walmanager.StateOpening.String(), term: 2, assignedSince: now.Add(-stall)},
			healthStalled, "opening since"},
		{"assigned, open not started, overdue", judgeInput{state: stateAssigned, term: 2, assignedSince: now.Add(-time.Minute)},
			healthStalled, "open not started"},
		{"last append failed", judgeInput{state: avail, term: 2, traffic: trafficSnapshot{failing: true, lastErr: "fenced"}},
			healthFailed, "appends failing: fenced"},
		{"appends waiting, briefly", judgeInput{state: avail, term: 2,
			traffic: trafficSnapshot{waiting: 3, busySince: now.Add(-time.Second)}}, healthHealthy, ""},
		{"appends waiting, none finished", judgeInput{state: avail, term: 2,
			traffic: trafficSnapshot{waiting: 3, busySince: now.Add(-time.Minute)}}, healthStalled, "3 appends waiting, none finished for 1m0s"},
		{"appends waiting, some finish", judgeInput{state: avail, term: 2,
			traffic: trafficSnapshot{waiting: 3, busySince: now.Add(-time.Minute), lastDone: now.Add(-time.Second)}}, healthHealthy, ""},
	}
	for _, tc := range cases {
		tc.in.now, tc.in.stallAfter = now, stall
		health, reason := judge(tc.in)
		require.Equal(t, tc.health, health, tc.name)
		require.Contains(t, reason, tc.reason, tc.name)
		if tc.reason == "" {
			require.Empty(t, reason, tc.name)
		}
	}
}

// The traffic record: counters per term, waiting across terms, a success
// clears a failure.
func TestTraffic(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	tr := newTraffic()
	c := tr.of("ch")
	require.Same(t, c, tr.of("ch"))
	c.begin(1, now)
	c.begin(1, now.Add(time.Second))
	s := c.snapshot()
	require.Equal(t, 2, s.waiting)
	require.Equal(t, now, s.busySince, "busy since the first")
	c.end(1, now.Add(2*time.Second), "", 0, false, errors.New("boom"))
	s = c.snapshot()
	require.True(t, s.failing)
	require.Equal(t, "boom", s.lastErr)
	c.end(1, now.Add(3*time.Second), "7", 42, true, nil)
	s = c.snapshot()
	require.False(t, s.failing, "a success clears it")
	require.EqualValues(t, 1, s.ok)
	require.EqualValues(t, 1, s.failed)
	require.Equal(t, "7", s.lastID)
	require.Zero(t, s.waiting)

	// A new term resets the counters but not what is in flight.
	c.begin(1, now)
	c.begin(2, now)
	s = c.snapshot()
	require.EqualValues(t, 2, s.term)
	require.Zero(t, s.ok)
	require.Equal(t, 2, s.waiting)
	c.end(1, now, "8", 43, true, nil) // of the old term: not counted
	require.Zero(t, c.snapshot().ok)
	c.end(2, now, "9", 44, true, nil)
	require.EqualValues(t, 1, c.snapshot().ok)

	// Readers: the slowest is the lowest timetick sent.
	r1, r2 := c.addReader(), c.addReader()
	r1.tt.Store(10)
	require.EqualValues(t, 10, c.snapshot().slowestTT, "a reader sent nothing is not counted")
	r2.tt.Store(5)
	require.EqualValues(t, 5, c.snapshot().slowestTT)
	c.removeReader(r2)
	require.Equal(t, 1, c.snapshot().readers)

	tr.prune(map[string]bool{})
	_, ok := tr.snapshot("ch")
	require.True(t, ok, "a channel with a reader is kept")
	c.removeReader(r1)
	tr.prune(map[string]bool{})
	_, ok = tr.snapshot("ch")
	require.False(t, ok)
}

// readFeed's responses: batches, the caught_up flag where the history ends.
func TestReadFeedResponses(t *testing.T) {
	d := func(ids ...string) []*streamwalv1.Delivered {
		var out []*streamwalv1.Delivered
		for _, id := range ids {
			out = append(out, &streamwalv1.Delivered{Id: id})
		}
		return out
	}
	ids := func(resps []*streamwalv1.ReadResponse) (out [][]string, flags []bool) {
		for _, r := range resps {
			var batch []string
			for _, m := range r.GetMessages() {
				batch = append(batch, m.GetId())
			}
			out = append(out, batch)
			flags = append(flags, r.GetCaughtUp())
		}
		return out, flags
	}
	f := &readFeed{batch: 2, flagAt: -1, out: d("a", "b", "c")}
	got, flags := ids(f.responses())
	require.Equal(t, [][]string{{"a", "b"}, {"c"}}, got)
	require.Equal(t, []bool{false, false}, flags)

	// The flag after 3 messages, 2 more after it: never in one response.
	f = &readFeed{batch: 2, flagAt: 3, out: d("a", "b", "c", "d", "e")}
	got, flags = ids(f.responses())
	require.Equal(t, [][]string{{"a", "b"}, {"c"}, {"d", "e"}}, got)
	require.Equal(t, []bool{false, true, false}, flags)

	// Caught up with nothing before the tail: an empty response says so.
	f = &readFeed{batch: 2, flagAt: 0}
	got, flags = ids(f.responses())
	require.Equal(t, [][]string{nil}, got)
	require.Equal(t, []bool{true}, flags)
	require.Empty(t, f.responses(), "once")
}
