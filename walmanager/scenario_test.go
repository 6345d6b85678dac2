package walmanager

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/internal/scenario"
)

// TestScenarios runs the stories in testdata/*.txt against the lifetime
// machine of one channel; see testdata/README.md for the commands, and
// go test -run TestScenarios -rewrite to regenerate their output.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata", func(t *testing.T) scenario.Handler {
		s := &machineScenario{m: newMachine("ch")}
		s.last = s.state()
		return s.run
	})
}

// machineScenario is one story: the machine, and its state as last
// printed, so that a command prints the state only when it changed.
type machineScenario struct {
	m    *machine
	last string
}

func (s *machineScenario) run(t *testing.T, d *datadriven.TestData) string {
	a := scenario.ArgsOf(t, d)
	var out []string
	switch d.Cmd {
	case "open", "remove":
		target := available(a.MustInt("term"))
		if d.Cmd == "remove" {
			target = removed(target.Term)
		}
		w := a.MustInt("w")
		v := s.m.request(waiterID(w), target)
		if v.done {
			out = append(out, fmt.Sprintf("w%d: %s", w, outcome(v.err)))
		} else {
			out = append(out, fmt.Sprintf("w%d: waits", w))
		}
		if v.abort {
			out = append(out, "abort the open in flight")
		}
		out = append(out, resolutions(v.resolved)...)
	case "next":
		out = append(out, describe(s.m.next()))
	case "run":
		// The driver doing what next asks until nothing is left, every
		// open and close succeeding.
		for i := 0; ; i++ {
			if i == 10 {
				d.Fatalf(t, "run: the machine keeps asking for work")
			}
			act := s.m.next()
			if act.kind == actNone {
				break
			}
			out = append(out, describe(act))
			if act.kind == actOpen {
				out = append(out, resolutions(s.m.opened(act.term, nil))...)
			} else {
				out = append(out, resolutions(s.m.closed(act.term, nil))...)
			}
		}
		if len(out) == 0 {
			out = append(out, "nothing to do")
		}
	case "opened", "closed":
		term := a.MustInt("term")
		want := action{kind: actOpen, term: term}
		if d.Cmd == "closed" {
			want.kind = actClose
		}
		s.mustBeInFlight(t, d, want)
		var err error
		if e := a.String("err", ""); e != "" {
			err = errors.New(e)
		}
		if d.Cmd == "opened" {
			out = resolutions(s.m.opened(term, err))
		} else {
			out = resolutions(s.m.closed(term, err))
		}
	case "fence":
		if s.m.fence(a.MustInt("term"), errors.New(a.String("reason", "fenced"))) {
			out = append(out, "fenced")
		} else {
			out = append(out, "ignored: not the current WAL, or fenced already")
		}
	case "forget":
		w := a.MustInt("w")
		if s.m.forget(waiterID(w)) {
			out = append(out, fmt.Sprintf("w%d: forgotten", w))
		} else {
			out = append(out, fmt.Sprintf("w%d: not waiting (resolved or forgotten already)", w))
		}
	case "stop":
		res, abort := s.m.stop()
		if abort {
			out = append(out, "abort the open in flight")
		}
		out = append(out, resolutions(res)...)
	case "state":
		a.Done()
		s.last = s.state()
		return s.last
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	a.Done()
	checkMachineInvariants(t, s.m)
	if st := s.state(); st != s.last {
		out = append(out, st)
		s.last = st
	}
	return scenario.Lines(out)
}

// mustBeInFlight fails a story that reports the outcome of an action the
// driver was not given: the machine trusts its driver on that.
func (s *machineScenario) mustBeInFlight(t *testing.T, d *datadriven.TestData, a action) {
	t.Helper()
	if !s.m.busy || s.m.inflight != a {
		d.Fatalf(t, "%s: the driver was not asked to %s", d.Cmd, describe(a))
	}
}

// state prints the machine in one line.
func (s *machineScenario) state() string {
	m := s.m
	st := m.status()
	line := fmt.Sprintf("state: %s, current %s, expected %s", st.State, m.current, m.expected)
	if m.busy {
		line += ", in flight " + describe(m.inflight)
	}
	if m.idle() {
		line += ", idle"
	}
	if m.lastErr != nil {
		line += ", last error " + outcome(m.lastErr)
	}
	if len(m.waiters) > 0 {
		ws := slices.Clone(m.waiters)
		slices.SortFunc(ws, func(a, b waiter) int { return int(a.id) - int(b.id) })
		var names []string
		for _, w := range ws {
			names = append(names, fmt.Sprintf("w%d→%s", w.id, w.target))
		}
		line += ", waiting " + strings.Join(names, " ")
	}
	return line
}

func describe(a action) string {
	switch a.kind {
	case actOpen:
		return fmt.Sprintf("open term %d", a.term)
	case actClose:
		return fmt.Sprintf("close term %d", a.term)
	}
	return "nothing to do"
}

// resolutions prints the outcomes handed to waiters, by waiter.
func resolutions(res []resolution) []string {
	res = slices.Clone(res)
	slices.SortFunc(res, func(a, b resolution) int { return int(a.id) - int(b.id) })
	out := make([]string, len(res))
	for i, r := range res {
		out[i] = fmt.Sprintf("w%d resolved: %s", r.id, outcome(r.err))
	}
	return out
}

// outcome names an error by the sentinel a caller branches on, else by
// the injected cause.
func outcome(err error) string {
	for _, s := range []struct {
		name string
		err  error
	}{{"stale", ErrStaleTerm}, {"superseded", ErrSuperseded}, {"manager closed", ErrManagerClosed}, {"not available", ErrChannelNotAvailable}} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	if err == nil {
		return "ok"
	}
	return errors.UnwrapAll(err).Error()
}
