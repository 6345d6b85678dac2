package walmanager

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errBoom = errors.New("boom")

func TestStateOrder(t *testing.T) {
	// Each state is strictly before every later one in this list.
	ordered := []state{initialState, available(0), removed(0), available(1), removed(1), available(7), removed(7)}
	for i, a := range ordered {
		for j, b := range ordered {
			assert.Equal(t, i < j, a.less(b), "%s < %s", a, b)
		}
	}
}

// TestMachineScripts drives the pure lifetime logic step by step. Each line
// is `command args => expected output`; see runMachineCommand for the
// commands and formatMachine* for the outputs.
func TestMachineScripts(t *testing.T) {
	cases := []struct{ name, script string }{
		{"open then reopen is idempotent", `
			open 1 5 => wait
			next => open@5
			state => cur=none exp=available@5 status=opening idle=false
			opened 5 ok => [1:ok]
			state => cur=available@5 exp=available@5 status=available idle=false
			open 2 5 => ok
			next => none`},
		{"terms arriving together open the newest only", `
			open 1 5 => wait
			open 2 6 => wait [1:superseded]
			open 3 7 => wait [2:superseded]
			open 4 6 => stale
			next => open@7
			opened 7 ok => [3:ok]
			next => none`},
		{"a newer term aborts the open in flight", `
			open 1 5 => wait
			next => open@5
			open 2 6 => wait abort [1:superseded]
			open 3 7 => wait abort [2:superseded]
			opened 5 fail => 
			state => cur=none exp=available@7 status=opening idle=false
			next => open@7
			opened 7 ok => [3:ok]`},
		{"an aborted open that succeeded anyway is closed first", `
			open 1 5 => wait
			next => open@5
			open 2 7 => wait abort [1:superseded]
			opened 5 ok => 
			state => cur=available@5 exp=available@7 status=opening idle=false
			next => close@5
			closed 5 ok => 
			next => open@7
			opened 7 ok => [2:ok]`},
		{"the old wal is closed before the new one opens", `
			open 1 5 => wait
			next => open@5
			opened 5 ok => [1:ok]
			open 2 7 => wait
			next => close@5
			open 3 7 => wait
			closed 5 ok => 
			state => cur=removed@5 exp=available@7 status=opening idle=false
			next => open@7
			opened 7 ok => [2:ok 3:ok]`},
		{"a failed open reaches its callers and is kept until retried", `
			open 1 5 => wait
			next => open@5
			open 2 5 => wait
			opened 5 fail => [1:boom 2:boom]
			state => cur=none exp=available@5 status=failed idle=true err=boom
			next => none
			open 3 5 => wait
			state => cur=none exp=available@5 status=opening idle=false err=boom
			next => open@5
			opened 5 ok => [3:ok]
			state => cur=available@5 exp=available@5 status=available idle=false err=boom`},
		{"remove after a failed open", `
			open 1 5 => wait
			next => open@5
			opened 5 fail => [1:boom]
			remove 2 5 => ok
			state => cur=removed@5 exp=removed@5 status=removed idle=true err=boom
			open 3 5 => stale
			open 4 4 => stale
			remove 5 5 => ok
			open 6 6 => wait
			next => open@6`},
		{"remove closes the wal", `
			open 1 5 => wait
			next => open@5
			opened 5 ok => [1:ok]
			remove 2 5 => wait
			state => cur=available@5 exp=removed@5 status=removing idle=false
			next => close@5
			remove 3 5 => wait
			closed 5 ok => [2:ok 3:ok]
			state => cur=removed@5 exp=removed@5 status=removed idle=true
			remove 4 5 => ok
			remove 5 4 => stale
			open 6 5 => stale`},
		{"remove while opening waits for the open to end", `
			open 1 5 => wait
			next => open@5
			remove 2 5 => wait abort [1:superseded]
			opened 5 ok => 
			next => close@5
			closed 5 ok => [2:ok]
			next => none`},
		{"a pending remove is done by a higher state once its wal is gone", `
			open 1 5 => wait
			next => open@5
			remove 2 5 => wait abort [1:superseded]
			open 3 7 => wait abort
			opened 5 fail => [2:ok]
			next => open@7
			opened 7 ok => [3:ok]`},
		{"a remove waits while an older wal is still held", `
			open 1 3 => wait
			next => open@3
			opened 3 ok => [1:ok]
			remove 2 3 => wait
			open 3 5 => wait
			remove 4 4 => stale
			next => close@3
			closed 3 ok => [2:ok]
			next => open@5
			opened 5 ok => [3:ok]`},
		{"remove of an unknown channel records the term", `
			remove 1 3 => ok
			state => cur=removed@3 exp=removed@3 status=removed idle=true
			open 2 3 => stale
			open 3 2 => stale
			open 4 4 => wait
			next => open@4`},
		{"a fenced wal reports unavailable until moved on", `
			open 1 5 => wait
			next => open@5
			opened 5 ok => [1:ok]
			fence 4 => false
			fence 5 => true
			fence 5 => false
			state => cur=available@5 exp=available@5 status=unavailable idle=false err=fenced
			next => none
			open 2 5 => notavail
			open 3 6 => wait
			next => close@5
			closed 5 ok => 
			next => open@6
			opened 6 ok => [3:ok]
			state => cur=available@6 exp=available@6 status=available idle=false err=fenced`},
		{"a caller that stops waiting leaves its request recorded", `
			open 1 5 => wait
			forget 1 => true
			forget 1 => false
			next => open@5
			opened 5 ok => 
			state => cur=available@5 exp=available@5 status=available idle=false`},
		{"a failed close is reported and the state moves on", `
			open 1 5 => wait
			next => open@5
			opened 5 ok => [1:ok]
			remove 2 5 => wait
			next => close@5
			closed 5 fail => [2:ok]
			state => cur=removed@5 exp=removed@5 status=removed idle=true err=boom`},
		{"stop resolves every waiter and closes what is held", `
			open 1 5 => wait
			next => open@5
			open 2 5 => wait
			remove 3 2 => stale
			stop => abort [1:closed 2:closed]
			opened 5 ok => 
			state => cur=available@5 exp=removed@5 status=closed idle=false
			next => close@5
			closed 5 ok => 
			next => none
			state => cur=removed@5 exp=removed@5 status=closed idle=true
			open 4 6 => closed`},
		{"stop of an idle channel needs nothing", `
			open 1 5 => wait
			next => open@5
			opened 5 fail => [1:boom]
			stop => 
			next => none
			state => cur=removed@5 exp=removed@5 status=closed idle=true err=boom`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine("ch")
			for n, line := range strings.Split(strings.TrimSpace(tc.script), "\n") {
				cmd, want, ok := strings.Cut(strings.TrimSpace(line), "=>")
				require.True(t, ok, "line %d: no =>: %q", n+1, line)
				got := runMachineCommand(t, m, strings.Fields(cmd))
				require.Equal(t, strings.TrimSpace(want), got, "line %d: %s", n+1, strings.TrimSpace(cmd))
				checkMachineInvariants(t, m)
			}
		})
	}
}

func runMachineCommand(t *testing.T, m *machine, f []string) string {
	t.Helper()
	arg := func(i int) int64 {
		v, err := strconv.ParseInt(f[i], 10, 64)
		require.NoError(t, err)
		return v
	}
	outcome := func(i int) error {
		if f[i] == "ok" {
			return nil
		}
		return errBoom
	}
	switch f[0] {
	case "open", "remove":
		target := available(arg(2))
		if f[0] == "remove" {
			target = removed(arg(2))
		}
		v := m.request(waiterID(arg(1)), target)
		var out []string
		switch {
		case !v.done:
			out = append(out, "wait")
		default:
			out = append(out, kindOf(v.err))
		}
		if v.abort {
			out = append(out, "abort")
		}
		return strings.Join(append(out, formatResolutions(v.resolved)...), " ")
	case "next":
		a := m.next()
		switch a.kind {
		case actOpen:
			return fmt.Sprintf("open@%d", a.term)
		case actClose:
			return fmt.Sprintf("close@%d", a.term)
		}
		return "none"
	case "opened":
		return strings.Join(formatResolutions(m.opened(arg(1), outcome(2))), " ")
	case "closed":
		return strings.Join(formatResolutions(m.closed(arg(1), outcome(2))), " ")
	case "fence":
		return strconv.FormatBool(m.fence(arg(1), errFencedForTest))
	case "forget":
		return strconv.FormatBool(m.forget(waiterID(arg(1))))
	case "stop":
		res, abort := m.stop()
		var out []string
		if abort {
			out = append(out, "abort")
		}
		return strings.Join(append(out, formatResolutions(res)...), " ")
	case "state":
		st := m.status()
		s := fmt.Sprintf("cur=%s exp=%s status=%s idle=%t", m.current, m.expected, st.State, m.idle())
		if st.LastError != nil {
			s += " err=" + kindOf(st.LastError)
		}
		return s
	}
	t.Fatalf("unknown command %q", f[0])
	return ""
}

var errFencedForTest = errors.New("fenced")

func kindOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrStaleTerm):
		return "stale"
	case errors.Is(err, ErrSuperseded):
		return "superseded"
	case errors.Is(err, ErrManagerClosed):
		return "closed"
	case errors.Is(err, ErrChannelNotAvailable):
		return "notavail"
	case errors.Is(err, errBoom):
		return "boom"
	case errors.Is(err, errFencedForTest):
		return "fenced"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other(" + err.Error() + ")"
}

func formatResolutions(res []resolution) []string {
	if len(res) == 0 {
		return nil
	}
	res = slices.Clone(res)
	slices.SortFunc(res, func(a, b resolution) int { return int(a.id) - int(b.id) })
	parts := make([]string, len(res))
	for i, r := range res {
		parts[i] = fmt.Sprintf("%d:%s", r.id, kindOf(r.err))
	}
	return []string{"[" + strings.Join(parts, " ") + "]"}
}

// checkMachineInvariants checks what must hold after every step.
func checkMachineInvariants(t *testing.T, m *machine) {
	t.Helper()
	require.False(t, m.expected.less(m.current), "current %s beyond expected %s", m.current, m.expected)
	if !m.busy && m.current.Removed && m.expected.Removed {
		require.Equal(t, m.expected, m.current, "unsettled removed state")
	}
	for _, w := range m.waiters {
		require.False(t, w.target.less(m.expected) && !w.target.Removed, "waiter %d for %s left behind %s", w.id, w.target, m.expected)
	}
}
