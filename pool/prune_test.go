package pool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/walimpls"
)

// pruneEnv is one pchannel of a pool, its WAL, and what the test appended
// to each vchannel and had its consumer process (checkpoint).
type pruneEnv struct {
	t   *testing.T
	ctx context.Context
	p   *pool.Pool
	w   adaptor.WAL
	pc  string

	mu       sync.Mutex
	appended map[string][]string // vchannel → payloads, in append order
	consumed map[string]int      // vchannel → how many of them are checkpointed
}

// newPruneEnv opens a one-pchannel pool named by prefix on backend b and
// store s, allocates vcs and opens the pchannel's WAL at term 1.
func newPruneEnv(t *testing.T, b walBackend, s meta.Store, prefix string, vcs []string) *pruneEnv {
	t.Helper()
	o := b.opener(t)
	p := openPool(t, s, pool.Backend{Name: b.name, Opener: o}, pool.Config{Size: 1, Prefix: prefix}, pool.Options{})
	for i := 0; i < len(vcs); i += pool.MaxBatch {
		_, err := p.Allocate(testCtx(t), vcs[i:min(i+pool.MaxBatch, len(vcs))]...)
		require.NoError(t, err)
	}
	pc := prefix + "0"
	return &pruneEnv{t: t, ctx: testCtx(t), p: p, w: openWAL(t, o, pc, 1), pc: pc, appended: map[string][]string{}, consumed: map[string]int{}}
}

// write appends n messages to vchannel v, then a watermark.
func (e *pruneEnv) write(v string, n int) {
	e.t.Helper()
	for range n {
		_, err := e.w.Append(e.ctx, e.next(v))
		require.NoError(e.t, err)
	}
	require.NoError(e.t, e.w.Sync(e.ctx))
}

// next returns the next message of v, recorded as appended.
func (e *pruneEnv) next(v string) message.Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	payload := fmt.Sprintf("%s-%d", v, len(e.appended[v]))
	e.appended[v] = append(e.appended[v], payload)
	m, err := message.New([]byte(payload), nil)
	require.NoError(e.t, err)
	return m.WithVChannel(v)
}

// resume is where v's consumer resumes: the pool's checkpoint, or the
// oldest retained message without one.
func (e *pruneEnv) resume(v string) cursor.Checkpoint {
	e.t.Helper()
	text, _, err := e.p.Checkpoint(e.ctx, v)
	if err != nil {
		require.ErrorIs(e.t, err, pool.ErrCheckpointUnknown)
		return cursor.Checkpoint{}
	}
	cp, err := e.w.ParseCheckpoint(text)
	require.NoError(e.t, err)
	return cp
}

// consume has v's consumer process k more messages from where it resumes
// and save its checkpoint.
func (e *pruneEnv) consume(v string, k int) {
	e.t.Helper()
	e.mu.Lock()
	done, want := e.consumed[v], e.appended[v]
	e.mu.Unlock()
	got := readVChannel(e.t, e.w, v, e.resume(v), k)
	for i, m := range got {
		require.Equal(e.t, want[done+i], string(m.Payload()), "%s resumed at the wrong message", v)
	}
	cp, err := cursor.CheckpointOf(got[k-1])
	require.NoError(e.t, err)
	require.NoError(e.t, e.p.SaveCheckpoint(e.ctx, v, 1, cp))
	e.mu.Lock()
	e.consumed[v] = done + k
	e.mu.Unlock()
}

// rest returns the payloads v's consumer reads from where it resumes up
// to the log's tail now.
func (e *pruneEnv) rest(v string) []string {
	e.t.Helper()
	tail, err := e.w.Tail(e.ctx)
	require.NoError(e.t, err)
	s, err := e.w.Read(e.ctx, adaptor.ReadOption{
		DeliverPolicy: cursor.After(e.resume(v)),
		Filter:        adaptor.Filter{VChannels: []string{v}, Kinds: []message.Kind{message.KindData, message.KindTimeTick}},
	})
	require.NoError(e.t, err, "%s resumes at a position that is gone", v)
	defer func() { _ = s.Close() }()
	out := []string{}
	for {
		select {
		case m, ok := <-s.Chan():
			require.Truef(e.t, ok, "%s: the scanner ended: %v", v, s.Error())
			if adaptor.CaughtUp(m, tail) {
				return out
			}
			if m.Kind() == message.KindData {
				out = append(out, string(m.Payload()))
			}
		case <-e.ctx.Done():
			require.FailNowf(e.t, "watchdog", "%s: read %d messages", v, len(out))
		}
	}
}

// requireIntact checks the safety property: each vchannel's consumer,
// resuming where the pool says, reads exactly what it has not processed.
func (e *pruneEnv) requireIntact(vcs ...string) {
	e.t.Helper()
	for _, v := range vcs {
		e.mu.Lock()
		want := append([]string{}, e.appended[v][e.consumed[v]:]...)
		e.mu.Unlock()
		require.Equal(e.t, want, e.rest(v), "what %s reads from where it resumes", v)
	}
}

// requireRetained checks that every vchannel resumes at a retained
// position: at or after where the pchannel was truncated.
func (e *pruneEnv) requireRetained(at message.ID, vcs ...string) {
	e.t.Helper()
	for _, v := range vcs {
		cp := e.resume(v)
		if cp.IsZero() {
			continue // from the oldest retained message
		}
		n, err := cp.Position.Compare(at)
		require.NoError(e.t, err)
		require.GreaterOrEqualf(e.t, n, 0, "%s resumes at %s, before the truncation point %s", v, cp, at)
	}
}

// pruneOnce runs one round of pr and returns what it did to the env's
// pchannel.
func (e *pruneEnv) pruneOnce(pr *pool.Pruner) pool.Pruned {
	e.t.Helper()
	res, err := pr.PruneOnce(e.ctx)
	require.NoError(e.t, err)
	for _, r := range res {
		if r.PChannel == e.pc {
			return r
		}
	}
	require.FailNowf(e.t, "not pruned", "%s is not in %v", e.pc, res)
	return pool.Pruned{}
}

func (e *pruneEnv) pruner(wal adaptor.WAL) *pool.Pruner {
	e.t.Helper()
	pr, err := pool.NewPruner(e.p, func(pc string) (adaptor.WAL, bool) { return wal, pc == e.pc }, time.Hour)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = pr.Close() })
	return pr
}

// requireTarget checks why a round truncated where it did.
func requireTarget(t *testing.T, res pool.Pruned, heldBy string, held, idle int) {
	t.Helper()
	require.Equal(t, heldBy, res.Target.HeldBy, "held by")
	require.Equal(t, held, res.Target.Held, "held")
	require.Equal(t, idle, res.Target.Idle, "idle")
}

// requireGone checks that a read from id is refused: it was pruned.
func requireGone(t *testing.T, w adaptor.WAL, id message.ID) {
	t.Helper()
	ctx := testCtx(t)
	s, err := w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.StartFrom(id)})
	if err != nil {
		require.ErrorIs(t, err, walimpls.ErrPositionGone)
		return
	}
	defer func() { _ = s.Close() }()
	select {
	case m, ok := <-s.Chan():
		require.Falsef(t, ok, "a read from the pruned %s delivered %s", id, m.ID())
		require.ErrorIs(t, s.Error(), walimpls.ErrPositionGone)
	case <-ctx.Done():
		require.FailNow(t, "watchdog")
	}
}

func vchannelNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("vc-%03d", i)
	}
	return out
}

// The GreptimeDB case: 115 vchannels share a pchannel, a few are written
// and checkpointed, the rest never written. The pchannel is pruned up to
// the checkpointed ones (not refused for want of 110 checkpoints), and once
// those caught up, up to the tail; each vchannel then resumes losing
// nothing, the never-written ones included.
func TestPruneIgnoresVChannelsNeverWritten(t *testing.T) {
	for _, b := range walBackends[:2] { // memory, local
		for _, k := range storeKinds {
			t.Run(b.name+"/"+k.name, func(t *testing.T) {
				vcs := vchannelNames(115)
				e := newPruneEnv(t, b, k.store(t)(), "idle-", vcs)
				written := vcs[:5]
				for range 20 {
					for _, v := range written {
						e.write(v, 1)
					}
				}
				for v, n := range map[string]int{"vc-000": 20, "vc-001": 5, "vc-002": 12, "vc-003": 20, "vc-004": 20} {
					e.consume(v, n)
				}
				laggard := e.resume("vc-001")

				pr := e.pruner(e.w)
				res := e.pruneOnce(pr)
				require.NoError(t, res.Err, "110 vchannels never written and without a checkpoint hold nothing back")
				require.Equal(t, laggard.Position, res.Target.Position, "pruned up to the laggard's checkpoint")
				requireTarget(t, res, "vc-001", 2, 113)
				e.requireRetained(res.Target.Position, vcs...)
				e.requireIntact(vcs...)

				// Everyone written caught up: nothing holds the pchannel back,
				// it is pruned up to the tail of the round.
				e.consume("vc-001", 15)
				e.consume("vc-002", 8)
				res = e.pruneOnce(pr)
				require.NoError(t, res.Err)
				require.Equal(t, res.Target.Tail.Position, res.Target.Position)
				requireTarget(t, res, "", 0, 115)
				e.requireRetained(res.Target.Position, vcs...)
				requireGone(t, e.w, laggard.Position)

				// Written again, an old vchannel and a new one resume exactly
				// at their new messages.
				e.write("vc-000", 2)
				e.write("vc-077", 3)
				e.requireIntact(vcs...)
				res = e.pruneOnce(pr)
				require.NoError(t, res.Err)
				requireTarget(t, res, "vc-000", 2, 113)
				e.requireIntact(vcs...)
			})
		}
	}
}

// A vchannel with an old checkpoint and nothing appended since does not
// hold its pchannel back at that checkpoint: it resumes where the pruner
// read up to, and still finds every message appended after.
func TestPruneIdleCheckpointDoesNotHold(t *testing.T) {
	for _, b := range walBackends[:2] {
		t.Run(b.name, func(t *testing.T) {
			vcs := []string{"busy", "quiet"}
			e := newPruneEnv(t, b, storeKinds[0].store(t)(), "quiet-", vcs)
			e.write("quiet", 5)
			e.consume("quiet", 5)
			old := e.resume("quiet")
			for range 10 {
				e.write("busy", 3)
			}
			e.consume("busy", 25)
			busy := e.resume("busy")

			pr := e.pruner(e.w)
			res := e.pruneOnce(pr)
			require.NoError(t, res.Err)
			require.Equal(t, busy.Position, res.Target.Position, "the idle vchannel's old checkpoint does not hold the pchannel")
			requireTarget(t, res, "busy", 1, 1)
			require.Equal(t, 1, res.Target.Moved, "quiet resumes at the tail now")
			moved := e.resume("quiet")
			require.Greater(t, moved.TimeTick, old.TimeTick)
			e.requireRetained(res.Target.Position, vcs...)
			requireGone(t, e.w, old.Position)
			e.requireIntact(vcs...)

			// Saving its own checkpoint again is not refused, and changes
			// nothing: it still resumes at the moved point.
			require.NoError(t, e.p.SaveCheckpoint(e.ctx, "quiet", 1, old))
			require.Equal(t, moved, e.resume("quiet"))

			// Written again, it holds the pchannel back at its resume point
			// until it processed that.
			e.write("quiet", 2)
			e.consume("busy", 5)
			res = e.pruneOnce(pr)
			require.NoError(t, res.Err)
			require.Equal(t, moved.Position, res.Target.Position)
			requireTarget(t, res, "quiet", 1, 1)
			e.requireIntact(vcs...)
			e.consume("quiet", 2)
			require.Greater(t, e.resume("quiet").TimeTick, moved.TimeTick, "its own checkpoint again")
			res = e.pruneOnce(pr)
			require.NoError(t, res.Err)
			requireTarget(t, res, "", 0, 2)
			e.requireRetained(res.Target.Position, vcs...)
			e.requireIntact(vcs...)
		})
	}
}

// hookWAL runs a test's hooks around the calls a prune round makes.
type hookWAL struct {
	adaptor.WAL
	beforeTail, afterTail func()
	beforeTruncate        func(upTo message.ID)
}

func (h *hookWAL) Tail(ctx context.Context) (cursor.Checkpoint, error) {
	if h.beforeTail != nil {
		h.beforeTail()
	}
	cp, err := h.WAL.Tail(ctx)
	if h.afterTail != nil {
		h.afterTail()
	}
	return cp, err
}

func (h *hookWAL) Truncate(ctx context.Context, upTo message.ID) error {
	if h.beforeTruncate != nil {
		h.beforeTruncate(upTo)
	}
	return h.WAL.Truncate(ctx, upTo)
}

// Nothing a vchannel has not checkpointed is ever truncated, also when
// appends and checkpoint saves race the round at each of its steps: appends
// in flight while the tail is taken, appends and saves while the log is
// read up to it, and after the target is decided, before it is truncated.
func TestPruneKeepsWhatIsNotCheckpointed(t *testing.T) {
	for _, b := range walBackends[:2] {
		for _, k := range storeKinds {
			t.Run(b.name+"/"+k.name, func(t *testing.T) {
				// busy: written and processed as the rounds go; fresh:
				// messages and no checkpoint; quiet: nothing after its
				// checkpoint when a round reads the log; never: not written
				// before the rounds.
				vcs := []string{"busy", "fresh", "never", "quiet"}
				e := newPruneEnv(t, b, k.store(t)(), "race-", vcs)
				e.write("quiet", 3)
				e.consume("quiet", 3)
				e.write("busy", 6)
				e.consume("busy", 6)
				e.write("busy", 2)
				e.write("fresh", 3)

				var async sync.WaitGroup
				h := &hookWAL{WAL: e.w}
				h.beforeTail = func() {
					// In flight while the tail is taken: below it.
					for _, v := range []string{"busy", "never"} {
						async.Add(1)
						e.w.AppendAsync(e.ctx, e.next(v), func(_ adaptor.AppendResult, err error) {
							defer async.Done()
							if err != nil {
								t.Error(err)
							}
						})
					}
				}
				h.afterTail = func() {
					// While the log is read up to the tail.
					async.Wait()
					e.write("quiet", 1)
					e.consume("busy", 1)
				}
				h.beforeTruncate = func(message.ID) {
					// Decided: after the tail.
					e.write("quiet", 1)
					e.write("never", 1)
					e.write("busy", 1)
					e.consume("busy", 1)
				}
				pr := e.pruner(h)
				for round := range 3 {
					res := e.pruneOnce(pr)
					require.NoErrorf(t, res.Err, "round %d", round)
					t.Logf("round %d: %+v", round, res.Target)
					if round == 0 {
						requireTarget(t, res, "busy", 3, 1)
						require.Equal(t, 1, res.Target.Moved, "quiet resumes at the tail, its later messages after it")
					}
					e.requireRetained(res.Target.Position, vcs...)
					e.requireIntact(vcs...)
					// Between rounds, consumers catch up.
					e.consume("quiet", 2)
					e.consume("never", len(e.appended["never"])-e.consumed["never"])
				}

				// Without the hooks, everyone caught up: pruned to the tail,
				// and every vchannel still reads what follows.
				h.beforeTail, h.afterTail, h.beforeTruncate = nil, nil, nil
				for _, v := range vcs {
					if n := len(e.appended[v]) - e.consumed[v]; n > 0 {
						e.consume(v, n)
					}
				}
				res := e.pruneOnce(pr)
				require.NoError(t, res.Err)
				requireTarget(t, res, "", 0, len(vcs))
				e.requireRetained(res.Target.Position, vcs...)
				for _, v := range vcs {
					e.write(v, 1)
				}
				e.requireIntact(vcs...)
			})
		}
	}
}

// Appenders, consumers and prune rounds all at once: a consumer resumes
// where the pool says whenever the pruner overtook its scanner, and at the
// end every vchannel reads exactly what it did not process.
func TestPruneUnderConcurrentAppends(t *testing.T) {
	all := vchannelNames(12)
	e := newPruneEnv(t, walBackends[0], storeKinds[0].store(t)(), "conc-", all)
	writers := all[:6]
	for _, v := range all[6:9] { // written and processed before: idle
		e.write(v, 5)
		e.consume(v, 5)
	}
	// all[9:] are never written.
	const perWriter = 150
	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	errs := make(chan error, 2*len(writers))
	for i, v := range writers {
		wg.Add(2)
		go func() { // the appender
			defer wg.Done()
			for range perWriter {
				if _, err := e.w.Append(ctx, e.next(v)); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() { // its consumer: processes all but 10*i, checkpoints every i+3
			defer wg.Done()
			if err := consumeConcurrently(ctx, e, v, perWriter-10*i, i+3); err != nil {
				errs <- fmt.Errorf("%s: %w", v, err)
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	pr := e.pruner(e.w)
	rounds, moved := 0, 0
	for done := false; !done; rounds++ {
		select {
		case <-finished:
			done = true
		case err := <-errs:
			require.NoError(t, err)
		default:
		}
		res := e.pruneOnce(pr)
		require.NoError(t, res.Err)
		moved += res.Target.Moved
		e.requireRetained(res.Target.Position, all...)
	}
	select {
	case err := <-errs:
		require.NoError(t, err)
	default:
	}
	t.Logf("%d rounds, %d resume points moved", rounds, moved)
	require.Positive(t, moved)
	e.requireIntact(all...)
	for _, v := range all {
		e.write(v, 1)
	}
	e.requireIntact(all...)
}

// consumeConcurrently processes n messages of v from where the pool says
// it resumes, saving a checkpoint every `every` and at the last; a scanner
// the pruner overtook (ErrPositionGone) resumes from the pool's checkpoint.
func consumeConcurrently(ctx context.Context, e *pruneEnv, v string, n, every int) error {
	done := 0
	for done < n {
		var from cursor.Checkpoint
		text, _, err := e.p.Checkpoint(ctx, v)
		switch {
		case err == nil:
			if from, err = e.w.ParseCheckpoint(text); err != nil {
				return err
			}
		case !errors.Is(err, pool.ErrCheckpointUnknown):
			return err
		}
		e.mu.Lock()
		done = e.consumed[v] // what is not checkpointed comes again
		e.mu.Unlock()
		s, err := e.w.Read(ctx, adaptor.ReadOption{DeliverPolicy: cursor.After(from), Filter: adaptor.Filter{VChannels: []string{v}}})
		if errors.Is(err, walimpls.ErrPositionGone) {
			continue
		}
		if err != nil {
			return err
		}
		err = func() error {
			defer func() { _ = s.Close() }()
			for done < n {
				select {
				case m, ok := <-s.Chan():
					if !ok {
						return s.Error()
					}
					if want := fmt.Sprintf("%s-%d", v, done); string(m.Payload()) != want {
						return fmt.Errorf("read %q, want %q (resumed at %s)", m.Payload(), want, from)
					}
					done++
					if done%every != 0 && done != n {
						continue
					}
					cp, err := cursor.CheckpointOf(m)
					if err == nil {
						err = e.p.SaveCheckpoint(ctx, v, 1, cp)
					}
					if err != nil {
						return err
					}
					e.mu.Lock()
					e.consumed[v] = done
					e.mu.Unlock()
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}()
		if err != nil && !errors.Is(err, walimpls.ErrPositionGone) {
			return err
		}
	}
	return nil
}

// A pruner that starts afresh (a restart: no cursor, the log read from its
// oldest retained message, a pool opened again) decides as the one before
// it did.
func TestPruneRestartDecidesTheSame(t *testing.T) {
	for _, b := range walBackends[:2] {
		t.Run(b.name, func(t *testing.T) {
			vcs := []string{"fresh", "held", "never", "quiet"}
			stores := storeKinds[0].store(t)
			e := newPruneEnv(t, b, stores(), "restart-", vcs)
			e.write("quiet", 4)
			e.consume("quiet", 4)
			e.write("held", 5)
			e.consume("held", 2)
			e.write("fresh", 3)
			e.write("held", 2)

			same := func(want pool.Pruned) {
				t.Helper()
				reopened := openPool(t, stores(), pool.Backend{Name: b.name}, pool.Config{Size: 1, Prefix: "restart-"}, pool.Options{})
				pr, err := pool.NewPruner(reopened, func(pc string) (adaptor.WAL, bool) { return e.w, pc == e.pc }, time.Hour)
				require.NoError(t, err)
				defer func() { _ = pr.Close() }()
				got, err := pr.PruneOnce(e.ctx)
				require.NoError(t, err)
				require.Len(t, got, 1)
				require.NoError(t, got[0].Err)
				require.Equal(t, want.Target.Position, got[0].Target.Position, "a restarted pruner's target")
				requireTarget(t, got[0], want.Target.HeldBy, want.Target.Held, want.Target.Idle)
				e.requireIntact(vcs...)
			}

			pr := e.pruner(e.w)
			// The held vchannel's checkpoint is the earliest.
			res := e.pruneOnce(pr)
			require.NoError(t, res.Err)
			requireTarget(t, res, "held", 2, 2)
			e.requireIntact(vcs...)
			same(res)

			// held caught up: fresh's first message holds the pchannel back.
			e.consume("held", 5)
			res = e.pruneOnce(pr)
			require.NoError(t, res.Err)
			requireTarget(t, res, "fresh", 1, 3)
			same(res)
			// And quiet, written again, at the point it was moved to.
			e.write("quiet", 1)
			e.consume("fresh", 3)
			res = e.pruneOnce(pr)
			require.NoError(t, res.Err)
			requireTarget(t, res, "quiet", 1, 3)
			same(res)
		})
	}
}
