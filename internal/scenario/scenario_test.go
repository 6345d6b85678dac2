package scenario

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestArgsAndClock reads each kind of argument and moves the clock both
// ways, through datadriven itself, as the drivers do.
func TestArgsAndClock(t *testing.T) {
	c := NewClock()
	datadriven.RunTestFromString(t, `
args n1 n2 term=3 prev=(a,b) wait=5s
----
words=[n1 n2] term=3 prev=[a b] wait=5s absent=7 has=true

tick +90s
----
t+1m30s

tick 2m
----
t+2m0s

tick +0s
----
t+2m0s
`, func(t *testing.T, d *datadriven.TestData) string {
		a := ArgsOf(t, d)
		defer a.Done()
		switch d.Cmd {
		case "args":
			return fmt.Sprintf("words=%v term=%d prev=%v wait=%s absent=%d has=%t",
				a.Words(), a.MustInt("term"), a.List("prev"), a.Duration("wait", 0), a.Int("absent", 7), a.Has("term"))
		case "tick":
			c.Tick(t, d, a.Word())
			return Since(c.Now())
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
	if !c.Now().Equal(Epoch.Add(2 * time.Minute)) {
		t.Fatalf("clock at %s", c.Now())
	}
}

func TestSortedAndLines(t *testing.T) {
	got := Lines(Sorted(map[string]int{"b": 1, "a": 2, "c": 3}))
	if got != "a\nb\nc\n" {
		t.Fatalf("got %q", got)
	}
	if Lines(nil) != "" || strings.Count(Lines([]string{"x"}), "\n") != 1 {
		t.Fatal("empty output must print nothing, one line one newline")
	}
}

// TestRunOneMachinePerFile: each .txt file starts a fresh machine, and a
// README beside them is not taken for a scenario.
func TestRunOneMachinePerFile(t *testing.T) {
	ran := 0
	Run(t, "testdata", func(*testing.T) Handler {
		ran++
		return func(t *testing.T, d *datadriven.TestData) string { return d.Input }
	})
	if ran != 1 {
		t.Fatalf("started %d machines, want one per .txt file (README skipped)", ran)
	}
}
