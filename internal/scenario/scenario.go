// Package scenario is the shared driver of the scenario tests of the pure
// state machines (walmanager's channel lifetime, coordinator's decisions,
// retention's prune rule). A scenario is a text file in a package's
// testdata/ directory telling one story: a command per paragraph, each
// followed by what the machine printed after "----", the format of
// github.com/cockroachdb/datadriven. A change in behaviour shows as a text
// diff of those files; go test's -rewrite flag regenerates the expected
// output after an intended change, for review in that diff.
//
// The package holds only what the three drivers share: walking the files,
// reading arguments strictly (a misspelt argument fails the scenario
// rather than being ignored), a clock with a fixed base, and sorted
// printing, so that output never depends on map order or on when the test
// runs.
package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// Handler runs one command of a scenario file and returns what it prints.
type Handler func(t *testing.T, d *datadriven.TestData) string

// Run runs every .txt file under dir as a subtest named after it, each
// against a fresh machine: start is called once per file. Other files
// (a README) are left alone. A directory without a scenario fails: a
// driver that runs nothing must not pass.
func Run(t *testing.T, dir string, start func(t *testing.T) Handler) {
	t.Helper()
	var files int
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err == nil && filepath.Ext(path) == ".txt" {
			files++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no scenario (.txt) under %s", dir)
	}
	datadriven.Walk(t, dir, func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			return
		}
		h := start(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h(t, d)
		})
	})
}

// Args reads the arguments of one command: bare words (`node-lost n2`)
// and key=value pairs (`open term=3`, `prev=(n1@2,n2@3)`). Done fails the
// test on any argument nothing read.
type Args struct {
	t    *testing.T
	d    *datadriven.TestData
	used []bool
}

// ArgsOf returns the arguments of d.
func ArgsOf(t *testing.T, d *datadriven.TestData) *Args {
	return &Args{t: t, d: d, used: make([]bool, len(d.CmdArgs))}
}

// Words returns the bare words, in order.
func (a *Args) Words() []string {
	var out []string
	for i, arg := range a.d.CmdArgs {
		if len(arg.Vals) == 0 {
			a.used[i] = true
			out = append(out, arg.Key)
		}
	}
	return out
}

// Word returns the single bare word of a command that takes exactly one.
func (a *Args) Word() string {
	a.t.Helper()
	w := a.Words()
	if len(w) != 1 {
		a.d.Fatalf(a.t, "%s takes one bare argument, got %q", a.d.Cmd, w)
	}
	return w[0]
}

// Has reports whether key was given (with or without a value).
func (a *Args) Has(key string) bool {
	for i, arg := range a.d.CmdArgs {
		if arg.Key == key {
			a.used[i] = true
			return true
		}
	}
	return false
}

// List returns the values of key: one for key=v, several for key=(v,w);
// nil when key is absent.
func (a *Args) List(key string) []string {
	for i, arg := range a.d.CmdArgs {
		if arg.Key == key && len(arg.Vals) > 0 {
			a.used[i] = true
			return arg.Vals
		}
	}
	return nil
}

// String returns the value of key, or def when it is absent.
func (a *Args) String(key, def string) string {
	a.t.Helper()
	v := a.List(key)
	switch len(v) {
	case 0:
		return def
	case 1:
		return v[0]
	}
	a.d.Fatalf(a.t, "%s: one value expected, got %q", key, v)
	return ""
}

// Int returns the integer value of key, or def when it is absent.
func (a *Args) Int(key string, def int64) int64 {
	a.t.Helper()
	s := a.String(key, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		a.d.Fatalf(a.t, "%s=%s: %v", key, s, err)
	}
	return n
}

// MustInt returns the integer value of key, failing when it is absent.
func (a *Args) MustInt(key string) int64 {
	a.t.Helper()
	if a.String(key, "") == "" {
		a.d.Fatalf(a.t, "%s needs %s=", a.d.Cmd, key)
	}
	return a.Int(key, 0)
}

// Duration returns the duration value of key, or def when it is absent.
func (a *Args) Duration(key string, def time.Duration) time.Duration {
	a.t.Helper()
	s := a.String(key, "")
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		a.d.Fatalf(a.t, "%s=%s: %v", key, s, err)
	}
	return v
}

// Done fails the test if an argument was given that nothing read: a typo
// in a scenario must not make it test something else silently.
func (a *Args) Done() {
	a.t.Helper()
	for i, arg := range a.d.CmdArgs {
		if !a.used[i] {
			a.d.Fatalf(a.t, "%s: unknown argument %s", a.d.Cmd, arg)
		}
	}
}

// Epoch is the time every scenario's clock starts at.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a scenario's time: it starts at Epoch and moves only when the
// scenario says so.
type Clock struct{ now time.Time }

// NewClock returns a clock at Epoch.
func NewClock() *Clock { return &Clock{now: Epoch} }

// Now returns the scenario's current time.
func (c *Clock) Now() time.Time { return c.now }

// Tick moves the clock as the argument says: "+5s" forward by 5s, "90s"
// to 90s after Epoch. Time never goes back.
func (c *Clock) Tick(t *testing.T, d *datadriven.TestData, arg string) {
	t.Helper()
	rel := strings.HasPrefix(arg, "+")
	v, err := time.ParseDuration(strings.TrimPrefix(arg, "+"))
	if err != nil || v < 0 {
		d.Fatalf(t, "tick %s: want +DURATION or DURATION (after the epoch)", arg)
	}
	next := Epoch.Add(v)
	if rel {
		next = c.now.Add(v)
	}
	if next.Before(c.now) {
		d.Fatalf(t, "tick %s: the clock is at %s already", arg, Since(c.now))
	}
	c.now = next
}

// Since prints t as its offset from Epoch: "t+1m30s" ("t+0s" at Epoch).
func Since(t time.Time) string { return "t+" + t.Sub(Epoch).String() }

// Sorted returns the keys of m in order.
func Sorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Lines joins lines into a command's output; "" prints as nothing.
func Lines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
