package walmanager

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/atomic"

	"github.com/streamwal/streamwal/internal/testseed"
)

type opKind uint8

const (
	// An Open call is recorded as two operations over the same interval:
	// its request (accepted or stale) and its completion (ok, superseded or
	// failed). The manager does both at different instants, and each has
	// its own linearization point somewhere inside the call.
	opOpenRequest opKind = iota
	opOpenDone
	opRemove
	opGet
)

var opNames = [...]string{"open-request", "open-done", "remove", "get"}

type modelInput struct {
	op   opKind
	ch   string
	term int64
}

// Outcomes as the model sees them.
const (
	outOK         = "ok"
	outAccepted   = "accepted"
	outStale      = "stale"
	outSuperseded = "superseded"
	outFailed     = "failed"
	outMismatch   = "mismatch"
	outNotAvail   = "notavail"
)

type modelOutput struct {
	result string
	err    error // for the report only
}

// modelState is the sequential specification of one channel: the expected
// state, and whether an Open of it has completed since it became expected.
type modelState struct {
	exp   state
	avail bool
}

// managerModel is the Manager as a sequential object, per channel:
//
//   - a request older than the expected state is stale and changes
//     nothing; any other request raises the expected state to its own;
//   - an Open completes ok only while its state is the expected one (then
//     the WAL is available), superseded only once a newer state is
//     expected, failed only while its state is still expected;
//   - Get answers for the expected term only (mismatch otherwise), hands
//     out the WAL exactly when an Open of the expected state has completed
//     ok and no newer request came since, and "not available" otherwise.
var managerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byCh := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range history {
			name := op.Input.(modelInput).ch
			if _, ok := byCh[name]; !ok {
				names = append(names, name)
			}
			byCh[name] = append(byCh[name], op)
		}
		out := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			out = append(out, byCh[n])
		}
		return out
	},
	Init: func() any { return modelState{exp: initialState} },
	Step: func(st, in, out any) (bool, any) {
		s, i, o := st.(modelState), in.(modelInput), out.(modelOutput)
		switch i.op {
		case opOpenRequest, opRemove:
			target := available(i.term)
			if i.op == opRemove {
				target = removed(i.term)
			}
			if target.less(s.exp) {
				return o.result == outStale, s
			}
			want := outAccepted
			if i.op == opRemove {
				want = outOK
			}
			if s.exp.less(target) {
				s = modelState{exp: target}
			}
			return o.result == want, s
		case opOpenDone:
			target := available(i.term)
			switch o.result {
			case outOK:
				return s.exp == target, modelState{exp: target, avail: true}
			case outSuperseded:
				return target.less(s.exp), s
			case outFailed:
				return s.exp == target && !s.avail, s
			}
			return false, s
		case opGet:
			switch {
			case s.exp == initialState:
				return o.result == outNotAvail, s
			case s.exp.Term != i.term:
				return o.result == outMismatch, s
			case s.exp == available(i.term) && s.avail:
				return o.result == outOK, s
			}
			return o.result == outNotAvail, s
		}
		return false, s
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(modelInput), out.(modelOutput)
		return fmt.Sprintf("%s %s@%d -> %s", i.ch, opNames[i.op], i.term, o.result)
	},
	DescribeState: func(st any) string {
		s := st.(modelState)
		return fmt.Sprintf("%s avail=%t", s.exp, s.avail)
	},
}

func classify(err error) string {
	switch {
	case err == nil:
		return outOK
	case errors.Is(err, ErrStaleTerm):
		return outStale
	case errors.Is(err, ErrSuperseded):
		return outSuperseded
	case errors.Is(err, ErrTermMismatch):
		return outMismatch
	case errors.Is(err, ErrChannelNotAvailable):
		return outNotAvail
	case errors.Is(err, errBoom):
		return outFailed
	}
	return "unexpected: " + err.Error()
}

// TestRandomizedAgainstModel runs thousands of interleaved Open, Remove and
// Get calls with random terms over several channels, against a backend
// whose opens are randomly slow or failing, and checks: no two WALs of a
// channel are ever open at once; a channel's current state never moves
// backward; the history is linearizable against managerModel; and once the
// calls stop, the channel ends at its highest requested state, with exactly
// the WAL of that term open if it is an open state.
func TestRandomizedAgainstModel(t *testing.T) {
	const (
		rounds   = 3
		clients  = 8
		perRound = 10000 // operations per round, over all clients
		channels = 4
	)
	base := testseed.Seed(t)
	for round := range rounds {
		seed := base + uint64(round)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runRandomRound(t, seed, clients, perRound/clients, channels)
		})
	}
}

func runRandomRound(t *testing.T, seed uint64, clients, opsPerClient, channels int) {
	backend := newFakeBackend(seed, 0.15, 300*time.Microsecond)
	m, err := New(backend, Options{CloseGracePeriod: 10 * time.Second})
	require.NoError(t, err)

	// The current state of every channel, as the hook sees it move.
	var hookMu sync.Mutex
	var backward []string
	lastCurrent := map[string]state{}
	m.onTransition = func(name string, from, to state) {
		hookMu.Lock()
		defer hookMu.Unlock()
		if prev, ok := lastCurrent[name]; ok && prev != from {
			backward = append(backward, fmt.Sprintf("%s: transition from %s but last seen %s", name, from, prev))
		}
		if !from.less(to) {
			backward = append(backward, fmt.Sprintf("%s: current moved backward %s -> %s", name, from, to))
		}
		lastCurrent[name] = to
	}

	names := make([]string, channels)
	epochs := make([]atomic.Int64, channels)
	for i := range names {
		names[i] = fmt.Sprintf("ch%d", i)
	}
	start := time.Now()
	now := func() int64 { return time.Since(start).Nanoseconds() }
	histories := make([][]porcupine.Operation, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			ctx := context.Background()
			for range opsPerClient {
				ci := rng.IntN(channels)
				// Terms wander upward with stale ones mixed in, the way
				// retried and reordered coordinator calls arrive.
				if rng.IntN(20) == 0 {
					epochs[ci].Add(1)
				}
				term := epochs[ci].Load()
				if r := rng.IntN(10); r >= 7 {
					term = max(0, term-int64(r-6))
				}
				in := modelInput{ch: names[ci], term: term}
				ch := Channel{Name: in.ch, Term: term}
				call := now()
				var err error
				switch r := rng.IntN(100); {
				case r < 45:
					in.op = opOpenRequest
					err = m.Open(ctx, ch)
				case r < 55:
					in.op = opRemove
					err = m.Remove(ctx, ch)
				default:
					in.op = opGet
					var w interface{ Close() error }
					var got Channel
					wal, gerr := m.GetAvailableWAL(ch)
					if err = gerr; err == nil {
						w, got = wal, wal.Channel()
						if got != ch {
							err = errors.Newf("got the wal of %v for %v", got, ch)
						} else if cerr := w.Close(); !errors.Is(cerr, ErrNotOwner) {
							err = errors.Newf("close of a handed-out wal: %v", cerr)
						}
					}
				}
				ret, out := now(), modelOutput{result: classify(err), err: err}
				if in.op == opOpenRequest && out.result != outStale {
					histories[c] = append(histories[c], porcupine.Operation{
						ClientId: c, Input: in, Call: call, Output: modelOutput{result: outAccepted}, Return: ret,
					})
					in.op = opOpenDone
				}
				histories[c] = append(histories[c], porcupine.Operation{
					ClientId: c, Input: in, Call: call, Output: out, Return: ret,
				})
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	var history []porcupine.Operation
	counts := map[string]int{}
	for _, h := range histories {
		for _, op := range h {
			out := op.Output.(modelOutput).result
			require.NotContains(t, out, "unexpected", "%+v", op)
			counts[opNames[op.Input.(modelInput).op]+"/"+out]++
		}
		history = append(history, h...)
	}
	res, info := porcupine.CheckOperationsVerbose(managerModel, history, 30*time.Second)
	if res == porcupine.Illegal {
		path := t.TempDir() + "/history.html"
		_ = porcupine.VisualizePath(managerModel, info, path)
		t.Fatalf("history of %d operations is not linearizable (visualization at %s)", len(history), path)
	}
	require.NotEqual(t, porcupine.Unknown, res, "linearizability check timed out")

	// Calls stopped: every channel ends at its highest requested state.
	backend.setFailRate(0)
	ctx := context.Background()
	for _, name := range names {
		top := initialState
		for _, op := range history {
			in := op.Input.(modelInput)
			switch {
			case in.ch != name || in.op == opGet:
			case in.op == opOpenRequest && top.less(available(in.term)):
				top = available(in.term)
			case in.op == opRemove && top.less(removed(in.term)):
				top = removed(in.term)
			}
		}
		m.mu.Lock()
		exp := m.channels[name].m.expected
		m.mu.Unlock()
		require.Equal(t, top, exp, "channel %s", name)
		ch := Channel{Name: name, Term: top.Term}
		if top.Removed {
			n, _ := backend.liveOf(name)
			require.Zero(t, n, "channel %s removed at %d keeps a wal open", name, top.Term)
			_, err := m.GetAvailableWAL(ch)
			require.ErrorIs(t, err, ErrChannelNotAvailable)
			continue
		}
		// The last open may have failed at random; retrying it must work.
		require.NoError(t, m.Open(ctx, ch), "channel %s", name)
		w, err := m.GetAvailableWAL(ch)
		require.NoError(t, err)
		require.Equal(t, ch, w.Channel())
		n, term := backend.liveOf(name)
		require.Equal(t, 1, n, "channel %s", name)
		require.Equal(t, top.Term, term, "channel %s", name)
	}

	require.NoError(t, m.Close(ctx))
	for _, name := range names {
		n, _ := backend.liveOf(name)
		require.Zero(t, n, "channel %s: wal left open after Close", name)
	}
	hookMu.Lock()
	require.Empty(t, backward)
	hookMu.Unlock()
	backend.mu.Lock()
	require.Empty(t, backend.violations)
	opens := backend.opens
	backend.mu.Unlock()
	t.Logf("%d operations in %s over %d channels, %d wals opened, linearizable; outcomes %v", len(history), elapsed, len(names), opens, counts)
}
