package pool

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
)

// The prune rule, case by case, on positions and timeticks of a made-up
// log: position n carries timetick 10n.
func TestDecide(t *testing.T) {
	at := func(n int64) message.ID { return message.NewSeqID("memory", n) }
	cp := func(n int64) cursor.Checkpoint { return cursor.Checkpoint{Position: at(n), TimeTick: uint64(10 * n)} }
	wrote := func(first, last int64) Written { return Written{FirstID: at(first), LastTimeTick: uint64(10 * last)} }
	tail := cp(50)

	for _, c := range []struct {
		name    string
		tail    cursor.Checkpoint
		vcs     []ruleVChannel
		want    Target
		move    []string
		missing []string
	}{{
		name: "nothing written, nothing checkpointed: up to the tail",
		tail: tail,
		vcs:  []ruleVChannel{{name: "a"}, {name: "b"}},
		want: Target{Position: at(50), Tail: tail, Idle: 2},
	}, {
		name: "messages after a checkpoint hold it; an idle one before the target moves",
		tail: tail,
		vcs: []ruleVChannel{
			{name: "busy", resume: cp(20), written: wrote(5, 30), wrote: true},
			{name: "quiet", resume: cp(10), written: wrote(3, 10), wrote: true},
			{name: "never"},
		},
		want: Target{Position: at(20), Tail: tail, HeldBy: "busy", Held: 1, Idle: 2},
		move: []string{"quiet"},
	}, {
		name: "an idle one at or after the target stays",
		tail: tail,
		vcs: []ruleVChannel{
			{name: "busy", resume: cp(20), written: wrote(5, 30), wrote: true},
			{name: "quiet", resume: cp(25), written: wrote(25, 25), wrote: true},
			{name: "same", resume: cp(20)},
		},
		want: Target{Position: at(20), Tail: tail, HeldBy: "busy", Held: 1, Idle: 2},
	}, {
		name: "messages and no checkpoint: held at the first",
		tail: tail,
		vcs: []ruleVChannel{
			{name: "fresh", written: wrote(12, 40), wrote: true},
			{name: "busy", resume: cp(20), written: wrote(5, 30), wrote: true},
		},
		want: Target{Position: at(12), Tail: tail, HeldBy: "fresh", Held: 2},
	}, {
		name: "a consumer past the tail keeps its own point",
		tail: tail,
		vcs:  []ruleVChannel{{name: "ahead", resume: cp(60), written: wrote(55, 55), wrote: true}},
		want: Target{Position: at(50), Tail: tail, Idle: 1},
	}, {
		name: "a moved resume point holds like a checkpoint",
		tail: tail,
		vcs:  []ruleVChannel{{name: "quiet", resume: cp(30), moved: true, written: wrote(3, 31), wrote: true}},
		want: Target{Position: at(30), Tail: tail, HeldBy: "quiet", Held: 1},
	}, {
		name: "no knowledge of the log: every checkpoint holds",
		vcs:  []ruleVChannel{{name: "a", resume: cp(20)}, {name: "b", resume: cp(7)}},
		want: Target{Position: at(7), HeldBy: "b", Held: 2},
	}, {
		name:    "no knowledge of the log: a vchannel without a checkpoint is unknown",
		vcs:     []ruleVChannel{{name: "a", resume: cp(20)}, {name: "b"}},
		want:    Target{Position: at(20), HeldBy: "a", Held: 1},
		missing: []string{"b"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			d, err := decide(c.tail, c.vcs)
			require.NoError(t, err)
			require.Equal(t, c.want, d.target)
			require.Equal(t, c.move, d.move)
			require.Equal(t, c.missing, d.missing)
		})
	}

	_, err := decide(tail, []ruleVChannel{{name: "x", written: Written{FirstID: message.NewSeqID("local", 1), LastTimeTick: 1}, wrote: true}})
	require.Error(t, err, "positions of another backend are not ordered")
}
