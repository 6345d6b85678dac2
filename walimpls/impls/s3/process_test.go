package s3_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// The process tests: a writer in a child process (child_test.go) on a
// store that outlives it (each test runs on versitygw, in a process of
// its own, and on gofakes3, in this one), its requests through an s3test
// proxy that holds the ones a test chooses, is killed (SIGKILL) or
// stopped (SIGSTOP) at a point the proxy's gate makes certain, and
// another writer takes the channel over.

// TestProcessKillMidFlush: a writer process appending with sixteen
// appenders is killed with four flushes in flight, held in the proxy:
// some before the store, some (a seeded choice) landed with their answers
// held. A new owner takes over at a higher term. Every acknowledged
// message is read back once, at its ID, in order; the old epoch is read
// exactly up to its first slot that never landed (a flush landed past
// that hole is never delivered, nor are the held PUTs let through after
// the takeover); the new owner's messages come after all of it; a reader
// tailing the channel throughout delivers the same as a fresh one.
func TestProcessKillMidFlush(t *testing.T) {
	seed := testseed.Seed(t)
	for _, store := range s3test.Stores(t) {
		t.Run(store.Name, func(t *testing.T) { killMidFlush(t, store, seed) })
	}
}

func killMidFlush(t *testing.T, store *s3test.Store, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := testCtx(t)
	const prefix, name = "kill/", "orders"
	proxy := s3test.NewProxy(t, store)
	c := startChild(t, proxy.Store(), s3.ChildSpec{Prefix: prefix, Channel: name, Term: 1, Appenders: 16,
		FlushInterval: 2 * time.Millisecond, FlushRecords: 2, MaxInflight: 4})
	c.until(t, ctx, "opened", func() bool { return c.opened })
	cfg := parentConfig(store, prefix)
	tail := startTail(t, openWAL(t, newOpener(t, cfg), name, 0, walimpls.ReadOnly), false)
	c.until(t, ctx, "50 messages acknowledged", func() bool { return len(c.acked) >= 50 })

	// From now on every data PUT is held in the proxy until the writer can
	// put no more (fullWindow): each before the store or, landed,
	// with its answer held, by its slot (a seeded choice that holds at
	// least one slot of every four before the store: a hole the takeover
	// must fence).
	mask := rng.IntN(15) // bit i: slots ≡ i (mod 4) land
	gate := s3test.NewGate()
	dataPut := s3test.And(s3test.Method("PUT"), s3test.KeyMatches(slotKeyRe(prefix, name)))
	lands := func(r s3test.Request) bool {
		_, s, _ := parseSlotKey(r.Key)
		return mask&(1<<(s%4)) != 0
	}
	proxy.Add(s3test.Rule{Match: s3test.And(dataPut, lands), Fault: s3test.HoldAnswer(gate)},
		s3test.Rule{Match: s3test.And(dataPut, s3test.Not(lands)), Fault: s3test.Hold(gate)})
	first, last, stored := fullWindow(t, ctx, proxy, gate, dataPut)
	c.kill(t)

	hole := first // the first slot not in the store
	for hole <= last && stored[hole] {
		hole++
	}
	epoch := c.epoch
	for p, id := range c.acked {
		e, s := slotOf(t, id)
		require.Equal(t, epoch, e, "%s acknowledged at %s", p, id)
		require.Less(t, s, first, "%s acknowledged at %s, in the held window", p, id)
	}
	require.Empty(t, c.failed, "nothing failed before the kill")
	t.Logf("killed with %d messages acknowledged; the window %d..%d held (%v in the store; mask %04b), its first hole at %d",
		len(c.acked), first, last, stored, mask, hole)

	owner := openWAL(t, newOpener(t, cfg), name, 2, walimpls.ReadWrite)
	// The dead writer's held PUTs go on to the store now, those whose
	// body it sent before it died: at the hole one meets the fence, after
	// it they land where no reader looks.
	gate.Release()
	waitHeldDone(t, ctx, proxy)
	for i := range 5 {
		appendOK(t, ctx, owner, fmt.Sprint("new-", i))
	}

	got := tail.until(t, ctx, "new-4")
	require.Equal(t, got, readAll(t, ctx, openWAL(t, newOpener(t, cfg), name, 0, walimpls.ReadOnly), "new-4"),
		"a tailing reader and a fresh one deliver the same")
	checkDelivered(t, got)
	checkAcked(t, c.acked, got)
	var oldSlots []uint64
	for i, d := range got {
		if i >= len(got)-5 {
			require.Equal(t, fmt.Sprint("new-", i-(len(got)-5)), d.payload, "the new owner's messages come last")
			continue
		}
		e, s := slotOf(t, d.id)
		require.Equal(t, epoch, e, "%s at %s: before the new owner's, only the old epoch", d.payload, d.id)
		require.Truef(t, strings.HasPrefix(d.payload, "t1-"), "%s at %s", d.payload, d.id)
		if len(oldSlots) == 0 || oldSlots[len(oldSlots)-1] != s {
			oldSlots = append(oldSlots, s)
		}
	}
	want := make([]uint64, hole)
	for s := range want {
		want[s] = uint64(s)
	}
	require.Equal(t, want, oldSlots, "the old epoch is read up to its first hole, slot %d, and not past it", hole)
}

// TestProcessKillMidTakeover: a process opening a channel at a higher term
// is killed while its open is half done (the proxy holds its fence PUT or
// its manifest PUT, before the store or, landed, with the answer held).
// The first writer, alive in this process, goes on while no fence stands
// in its way and is fenced, with nothing stored, once one does; an open at
// a still higher term succeeds and fences it for good, an open at the dead
// process's term is refused, and nothing acknowledged is lost.
func TestProcessKillMidTakeover(t *testing.T) {
	for _, store := range s3test.Stores(t) {
		t.Run(store.Name, func(t *testing.T) { killMidTakeover(t, store) })
	}
}

func killMidTakeover(t *testing.T, store *s3test.Store) {
	ctx := testCtx(t)
	const name = "orders"
	for _, tc := range []struct {
		name     string
		manifest bool // hold the manifest's PUT, else the fence's
		landed   bool // the held PUT lands and its answer is held
	}{
		{"fence-held", false, false},
		{"fence-landed", false, true},
		{"manifest-held", true, false},
		{"manifest-landed", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "takeover-" + tc.name + "/"
			cfg := parentConfig(store, prefix)
			w1 := openWAL(t, newOpener(t, cfg), name, 1, walimpls.ReadWrite)
			var want []delivery
			for i := range 3 {
				want = append(want, appendOK(t, ctx, w1, fmt.Sprint("w1-", i)))
			}

			gate := s3test.NewGate()
			match := s3test.And(s3test.Method("PUT"), s3test.KeyMatches(slotKeyRe(prefix, name)))
			if tc.manifest {
				match = s3test.And(s3test.Method("PUT"), s3test.Key(prefix+name+"/manifest"))
			}
			fault := s3test.Hold(gate)
			if tc.landed {
				fault = s3test.HoldAnswer(gate)
			}
			proxy := s3test.NewProxy(t, store, s3test.Rule{Match: match, Fault: fault})
			c := startChild(t, proxy.Store(), s3.ChildSpec{Prefix: prefix, Channel: name, Term: 2})
			require.NoError(t, gate.WaitArrived(ctx, 1))
			c.kill(t)
			require.False(t, c.opened, "the child's open never returned")

			// A fence is in the store unless the dead open's fence PUT
			// never got there.
			fenced := tc.manifest || tc.landed
			m, _ := message.New([]byte("w1-after-kill"), nil)
			id, err := walimpls.Append(ctx, w1, m)
			if fenced {
				require.ErrorIs(t, err, walimpls.ErrFenced)
				require.True(t, walimpls.NotStored(err), "a flush that met a fence is stored nowhere: %v", err)
			} else {
				require.NoError(t, err, "no fence was written: the first writer goes on")
				want = append(want, delivery{"w1-after-kill", id.Marshal()})
			}

			owner := openWAL(t, newOpener(t, cfg), name, 3, walimpls.ReadWrite)
			m, _ = message.New([]byte("w1-late"), nil)
			_, err = walimpls.Append(ctx, w1, m)
			require.ErrorIs(t, err, walimpls.ErrFenced)
			require.True(t, walimpls.NotStored(err), "%v", err)
			_, err = newOpener(t, cfg).Open(ctx, walimpls.Channel{Name: name, Term: 2})
			require.ErrorIs(t, err, walimpls.ErrFenced, "the dead open's term is below the channel's now")
			for i := range 3 {
				want = append(want, appendOK(t, ctx, owner, fmt.Sprint("w3-", i)))
			}
			got := readAll(t, ctx, openWAL(t, newOpener(t, cfg), name, 0, walimpls.ReadOnly), "w3-2")
			require.Equal(t, want, got)
		})
	}
}

// TestProcessStoppedZombie: a writer process appending with sixteen
// appenders is stopped (SIGSTOP) with the flushes it has in flight held in
// the proxy before the store. A new owner takes over at a higher term and
// appends; the writer is then resumed (SIGCONT) and its held PUTs let
// through (the first meets the fence, those after it land past it). The
// zombie gets no acknowledgement at or after the fence (so none for an
// append made after the takeover), every one of its appends fails fenced
// and not stored, which is true: no reader, tailing or fresh, ever
// delivers what it wrote after the fence, and every message it had
// acknowledged is read back.
func TestProcessStoppedZombie(t *testing.T) {
	for _, store := range s3test.Stores(t) {
		t.Run(store.Name, func(t *testing.T) { stoppedZombie(t, store) })
	}
}

func stoppedZombie(t *testing.T, store *s3test.Store) {
	ctx := testCtx(t)
	const prefix, name = "zombie/", "orders"
	proxy := s3test.NewProxy(t, store)
	c := startChild(t, proxy.Store(), s3.ChildSpec{Prefix: prefix, Channel: name, Term: 1, Appenders: 16,
		FlushInterval: 2 * time.Millisecond, FlushRecords: 2, MaxInflight: 4})
	c.until(t, ctx, "opened", func() bool { return c.opened })
	cfg := parentConfig(store, prefix)
	tail := startTail(t, openWAL(t, newOpener(t, cfg), name, 0, walimpls.ReadOnly), false)
	c.until(t, ctx, "50 messages acknowledged", func() bool { return len(c.acked) >= 50 })

	// From now on every data PUT is held in the proxy before the store,
	// until the writer can put no more (fullWindow); then the writer is
	// stopped.
	gate := s3test.NewGate()
	dataPut := s3test.And(s3test.Method("PUT"), s3test.KeyMatches(slotKeyRe(prefix, name)))
	proxy.Add(s3test.Rule{Match: dataPut, Fault: s3test.Hold(gate)})
	first, last, stored := fullWindow(t, ctx, proxy, gate, dataPut)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	waitStopped(t, ctx, c.cmd.Process.Pid)

	owner := openWAL(t, newOpener(t, cfg), name, 2, walimpls.ReadWrite)
	for i := range 5 {
		appendOK(t, ctx, owner, fmt.Sprint("new-", i))
	}
	tail.until(t, ctx, "new-4")

	// The zombie wakes, and its held PUTs go on to the store. (Not the
	// other way round: a PUT's body may still be in the zombie, which
	// sends the header first.)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
	gate.Release()
	waitHeldDone(t, ctx, proxy)
	for _, r := range proxy.Requests() {
		if len(r.Faults) > 0 {
			_, s, _ := parseSlotKey(r.Key)
			want := 200 // past the fence: lands, and is never read
			if s == first {
				want = 412 // the fence
			}
			require.Equal(t, want, r.Status, "the zombie's PUT of slot %d", s)
		}
	}
	t.Logf("the window %d..%d held (%v in the store before the takeover)", first, last, stored)
	c.until(t, ctx, "every appender stopped", func() bool { return c.done })
	require.NoError(t, c.wait(), "stderr: %s", c.stderr.String())

	epoch := c.epoch
	for p, id := range c.acked {
		e, s := slotOf(t, id)
		require.Equal(t, epoch, e, "%s acknowledged at %s", p, id)
		require.Less(t, s, first, "%s acknowledged at %s, at or after the fence at slot %d", p, id, first)
	}
	require.NotEmpty(t, c.failed)
	for p, f := range c.failed {
		require.True(t, f.fenced && f.notStored, "%s failed %+v: want fenced, not stored", p, f)
	}
	appendOK(t, ctx, owner, "new-last")

	got := tail.until(t, ctx, "new-last")
	require.Equal(t, got, readAll(t, ctx, openWAL(t, newOpener(t, cfg), name, 0, walimpls.ReadOnly), "new-last"),
		"a tailing reader and a fresh one deliver the same")
	checkDelivered(t, got)
	checkAcked(t, c.acked, got)
	old := 0
	for _, d := range got {
		if strings.HasPrefix(d.payload, "t1-") {
			old++
			_, s := slotOf(t, d.id)
			require.Less(t, s, first, "%s at %s: written after the fence, and read", d.payload, d.id)
		}
	}
	require.Equal(t, len(c.acked), old, "the zombie's messages read are the ones it acknowledged")
	t.Logf("the zombie acknowledged %d messages; %d of its appends failed fenced; fenced at slot %d", len(c.acked), len(c.failed), first)
}

// child is a writer process (child_test.go) and what it reported so far.
type child struct {
	cmd     *exec.Cmd
	stderr  *syncBuffer
	eof     chan struct{} // its stdout ended
	waited  bool
	waitErr error

	mu      sync.Mutex
	changed chan struct{}
	opened  bool
	epoch   uint64
	done    bool
	acked   map[string]string // payload → ID
	failed  map[string]childFailure
}

// childFailure is a failed append's report: its outcome and error.
type childFailure struct {
	notStored, fenced bool
	err               string
}

// startChild starts a writer process of spec on store st; the test's
// cleanup kills it if it is still there.
func startChild(t *testing.T, st *s3test.Store, spec s3.ChildSpec) *child {
	t.Helper()
	spec.Endpoint, spec.Bucket, spec.Region = st.Endpoint, st.Bucket, st.Region
	spec.AccessKey, spec.SecretKey = st.AccessKey, st.SecretKey
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	c := &child{stderr: &syncBuffer{}, eof: make(chan struct{}), changed: make(chan struct{}),
		acked: map[string]string{}, failed: map[string]childFailure{}}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	// Under -race, a process sleeps a second before it exits
	// (atexit_sleep_ms), for races at exit: the child's races are found
	// while it runs.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	c.cmd.Env = append(os.Environ(), s3.ChildEnv+"="+string(raw), "GORACE="+gorace)
	c.cmd.Stderr = c.stderr
	// Killed with this process, should that die first.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := c.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.cmd.Start())
	go c.read(out)
	t.Cleanup(func() {
		if !c.waited {
			_ = c.cmd.Process.Kill()
			_ = c.wait()
		}
		// Nothing, unless it failed (or raced: -race reports there).
		if e := c.stderr.String(); e != "" {
			t.Errorf("the child wrote to stderr:\n%s", e)
		}
	})
	return c
}

// read takes in the child's report lines until its stdout ends.
func (c *child) read(out io.Reader) {
	defer close(c.eof)
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		c.mu.Lock()
		switch {
		case len(f) == 2 && f[0] == "opened":
			c.opened = true
			c.epoch, _ = strconv.ParseUint(f[1], 10, 64)
		case len(f) == 3 && f[0] == "acked":
			c.acked[f[1]] = f[2]
		case len(f) >= 4 && f[0] == "failed":
			c.failed[f[1]] = childFailure{notStored: f[2] == "notstored", fenced: f[3] == "fenced", err: strings.Join(f[4:], " ")}
		case len(f) == 1 && f[0] == "done":
			c.done = true
		default:
			_, _ = fmt.Fprintf(c.stderr, "(parent: unparsed line %q)\n", sc.Text())
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
}

// until waits until cond (called with c.mu held) holds; the child's end or
// ctx's fails the test.
func (c *child) until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for {
		c.mu.Lock()
		ok, changed := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-c.eof:
			c.mu.Lock()
			ok = cond()
			c.mu.Unlock()
			require.Truef(t, ok, "the child ended before %s; stderr:\n%s", what, c.stderr.String())
			return
		case <-ctx.Done():
			require.FailNowf(t, "watchdog", "the child did not get to %s; stderr:\n%s", what, c.stderr.String())
		}
	}
}

// wait waits for the child's end (its report read whole) and returns how
// it ended.
func (c *child) wait() error {
	if !c.waited {
		<-c.eof
		c.waitErr = c.cmd.Wait()
		c.waited = true
	}
	return c.waitErr
}

// kill kills the child with SIGKILL and waits for it.
func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	err := c.wait()
	var exit *exec.ExitError
	require.Truef(t, errors.As(err, &exit), "the child was not killed: %v; stderr:\n%s", err, c.stderr.String())
	ws, _ := exit.Sys().(syscall.WaitStatus)
	require.Truef(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child ended with %v; stderr:\n%s", err, c.stderr.String())
}

// waitStopped waits until process pid is stopped (state T in
// /proc/<pid>/stat): a signal is delivered asynchronously.
func waitStopped(t *testing.T, ctx context.Context, pid int) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		require.NoError(t, err)
		// "pid (comm) state ...": comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			require.FailNow(t, "watchdog: the child did not stop")
		}
	}
}

// slotKeyRe matches the keys of a channel's slots (data and fences).
func slotKeyRe(prefix, name string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(prefix+name) + `/e\d{20}/\d{20}$`)
}

// slotOf returns the epoch and slot of an ID ("<epoch>.<slot>.<index>").
func slotOf(t *testing.T, id string) (uint64, uint64) {
	t.Helper()
	f := strings.Split(id, ".")
	require.Len(t, f, 3, id)
	e, err := strconv.ParseUint(f[0], 10, 64)
	require.NoError(t, err, id)
	s, err := strconv.ParseUint(f[1], 10, 64)
	require.NoError(t, err, id)
	return e, s
}

// fullWindow waits until a writer (MaxInflight 4, so a window of 8) can put
// no other slot until the lowest slot s whose PUT a gate holds is
// answered: a PUT of each slot s..last, the ones not held answered, the
// held ones at the gate (so that those held after the store are in it),
// and either 4 held (MaxInflight in flight) or last = s+7 (the window used
// up). It checks that the writer kept both bounds, and returns s, last
// and, for each slot of s..last, whether it is in the store.
func fullWindow(t *testing.T, ctx context.Context, p *s3test.Proxy, g *s3test.Gate, dataPut s3test.Matcher) (first, last uint64, stored map[uint64]bool) {
	t.Helper()
	const maxInflight, window = 4, 8 // the epoch's window is twice MaxInflight (package doc)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var (
			first   = uint64(math.MaxUint64)
			held    int
			settled = true
			puts    = map[uint64]s3test.Request{}
		)
		for _, r := range p.Requests() {
			if !dataPut(r) {
				continue
			}
			_, s, ok := parseSlotKey(r.Key)
			require.True(t, ok, r.Key)
			if len(r.Faults) > 0 {
				held++
				first = min(first, s)
			} else if !r.Done {
				settled = false
			}
			puts[s] = r
		}
		if held > 0 && settled && g.Arrived() == held {
			last := slices.Max(slices.Collect(maps.Keys(puts)))
			stored := map[uint64]bool{}
			for s := first; s <= last; s++ {
				r, ok := puts[s]
				if !ok {
					stored = nil // a slot is put in order: one to come
					break
				}
				stored[s] = r.Status == 200 || slices.Contains(r.Faults, "hold-answer")
			}
			if stored != nil {
				require.LessOrEqual(t, held, maxInflight, "PUTs in flight at once")
				require.LessOrEqual(t, last+1-first, uint64(window), "PUTs beyond the window: %v", slices.Sorted(maps.Keys(puts)))
				if held == maxInflight || last+1-first == window {
					return first, last, stored
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			require.FailNow(t, "watchdog: the writer's window did not fill")
		}
	}
}

// parseSlotKey returns the epoch and slot of a slot's key.
func parseSlotKey(key string) (epoch, slot uint64, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) < 2 {
		return 0, 0, false
	}
	e, err1 := strconv.ParseUint(strings.TrimPrefix(parts[len(parts)-2], "e"), 10, 64)
	s, err2 := strconv.ParseUint(parts[len(parts)-1], 10, 64)
	return e, s, err1 == nil && err2 == nil
}

// waitHeldDone waits until every request a gate held got its outcome.
func waitHeldDone(t *testing.T, ctx context.Context, p *s3test.Proxy) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		done := true
		for _, r := range p.Requests() {
			if len(r.Faults) > 0 && !r.Done {
				done = false
			}
		}
		if done {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			require.FailNow(t, "watchdog: held requests did not end")
		}
	}
}

// delivery is a message as a reader delivered it, or as an append was
// acknowledged.
type delivery struct {
	payload string
	id      string
}

// checkDelivered checks what a reader delivered: IDs strictly
// increasing, no payload twice, every batch (a child's -<i>of<n>
// payloads) whole and in order.
func checkDelivered(t *testing.T, got []delivery) {
	t.Helper()
	seen := map[string]bool{}
	var (
		batch      string // the batch being delivered
		next, size int
	)
	for i, d := range got {
		require.Falsef(t, seen[d.payload], "%s delivered twice", d.payload)
		seen[d.payload] = true
		if i > 0 {
			require.Truef(t, idLess(t, got[i-1].id, d.id), "%s at %s after %s", d.payload, d.id, got[i-1].id)
		}
		base, part, n, ok := batchPart(d.payload)
		if batch != "" {
			require.Truef(t, ok && base == batch && part == next, "%s where part %d of batch %s belongs", d.payload, next, batch)
			if next++; next == size {
				batch = ""
			}
			continue
		}
		if ok {
			require.Zerof(t, part, "%s without the parts before it", d.payload)
			batch, next, size = base, 1, n
		}
	}
	require.Empty(t, batch, "the last batch is cut short")
}

// idLess compares two IDs ("<epoch>.<slot>.<index>").
func idLess(t *testing.T, a, b string) bool {
	t.Helper()
	parse := func(s string) [3]uint64 {
		var v [3]uint64
		f := strings.Split(s, ".")
		require.Len(t, f, 3, s)
		for i := range f {
			n, err := strconv.ParseUint(f[i], 10, 64)
			require.NoError(t, err, s)
			v[i] = n
		}
		return v
	}
	x, y := parse(a), parse(b)
	return slices.Compare(x[:], y[:]) < 0
}

// batchPart parses a child's batch payload, t1-g3-17-1of3.
func batchPart(p string) (base string, part, n int, ok bool) {
	i := strings.LastIndexByte(p, '-')
	if i < 0 {
		return "", 0, 0, false
	}
	a, b, found := strings.Cut(p[i+1:], "of")
	if !found {
		return "", 0, 0, false
	}
	part, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return p[:i], part, n, true
}

// checkAcked checks that every acknowledged message was delivered, at the
// ID it was acknowledged with.
func checkAcked(t *testing.T, acked map[string]string, got []delivery) {
	t.Helper()
	at := map[string]string{}
	for _, d := range got {
		at[d.payload] = d.id
	}
	for p, id := range acked {
		require.Equalf(t, id, at[p], "acknowledged %s at %s is not read back there", p, id)
	}
}

// tail is a reader reading a channel from its start in the background,
// tailing it, until the test ends.
type tail struct {
	mu      sync.Mutex
	changed chan struct{}
	got     []delivery
	last    message.ID // of got's last
	err     error      // why it stopped early
	resumed int        // scanner errors read on after
}

// startTail starts a tailing reader of w; resume reads on after a
// scanner's error, from the last message delivered (a store with faults),
// else the error ends it.
func startTail(t *testing.T, w walimpls.WALImpl, resume bool) *tail {
	r := &tail{changed: make(chan struct{})}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			opt := walimpls.ReadOption{Name: "tail"}
			r.mu.Lock()
			if len(r.got) > 0 {
				opt.DeliverPolicy = cursor.StartAfter(r.last)
			}
			r.mu.Unlock()
			err := r.scan(w, opt, stop)
			if err == nil {
				return // stopped
			}
			r.mu.Lock()
			if !resume {
				r.err = err
			}
			r.resumed++
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
			if !resume {
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-stopped
	})
	return r
}

// scan reads with one scanner until stop (nil) or its end (its error).
func (r *tail) scan(w walimpls.WALImpl, opt walimpls.ReadOption, stop chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := w.Read(ctx, opt)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() { _ = s.Close() }()
	for {
		select {
		case m, ok := <-s.Chan():
			if !ok {
				if err := s.Error(); err != nil {
					return err
				}
				return errors.New("the scanner ended without an error")
			}
			r.mu.Lock()
			r.got = append(r.got, delivery{string(m.Payload()), m.ID().Marshal()})
			r.last = m.ID()
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		case <-stop:
			return nil
		}
	}
}

// until waits until the reader delivered payload and returns what it
// delivered up to it.
func (r *tail) until(t *testing.T, ctx context.Context, payload string) []delivery {
	t.Helper()
	for {
		r.mu.Lock()
		for i, d := range r.got {
			if d.payload == payload {
				got := slices.Clone(r.got[:i+1])
				r.mu.Unlock()
				return got
			}
		}
		err, changed, n := r.err, r.changed, len(r.got)
		r.mu.Unlock()
		require.NoError(t, err, "the reader stopped before %s", payload)
		select {
		case <-changed:
		case <-ctx.Done():
			require.FailNowf(t, "watchdog", "%s not delivered; %d messages were", payload, n)
		}
	}
}

// readAll reads w from its start up to payload.
func readAll(t *testing.T, ctx context.Context, w walimpls.WALImpl, payload string) []delivery {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := w.Read(ctx, walimpls.ReadOption{Name: "check"})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	var got []delivery
	for {
		select {
		case m, ok := <-s.Chan():
			require.Truef(t, ok, "the scanner ended: %v", s.Error())
			got = append(got, delivery{string(m.Payload()), m.ID().Marshal()})
			if string(m.Payload()) == payload {
				return got
			}
		case <-ctx.Done():
			require.FailNowf(t, "watchdog", "%s not delivered; %d messages were", payload, len(got))
		}
	}
}

// appendOK appends a message of payload and returns it as acknowledged.
func appendOK(t *testing.T, ctx context.Context, w walimpls.WALImpl, payload string) delivery {
	t.Helper()
	m, err := message.New([]byte(payload), nil)
	require.NoError(t, err)
	id, err := walimpls.Append(ctx, w, m)
	require.NoError(t, err, "append %s", payload)
	return delivery{payload, id.Marshal()}
}

// parentConfig is the configuration of this process's Openers on st.
func parentConfig(st *s3test.Store, prefix string) s3.Config {
	cfg := st.Config(prefix)
	cfg.FlushInterval = 2 * time.Millisecond
	cfg.PollInterval = 5 * time.Millisecond
	cfg.ProbeRacers = 2
	return cfg
}

func testLogger() *slog.Logger {
	if os.Getenv("S3_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newOpener makes an Opener of cfg, closed with the test.
func newOpener(t *testing.T, cfg s3.Config) *s3.Opener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := s3.New(ctx, cfg, walimpls.WithLogger(testLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// openWAL opens a WAL of name at term, closed with the test.
func openWAL(t *testing.T, o *s3.Opener, name string, term int64, mode walimpls.AccessMode) walimpls.WALImpl {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := o.Open(ctx, walimpls.Channel{Name: name, Term: term, Mode: mode})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// testCtx bounds a test: a watchdog, not a timing.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer collects a process's stderr, written from exec's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
