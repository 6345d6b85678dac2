// Package walmanagertest holds the two-node takeover scenario shared by
// backend tests.
//
// Each backend package with fencing runs it over two openers that are two
// nodes of one backend (their own clients, the same log):
//
//	func TestTakeover(t *testing.T) {
//		res := walmanagertest.RunTakeover(t, nodeA, nodeB, walmanagertest.TakeoverOptions{Backend: "local"})
//		_ = res.P99
//	}
//
// It lives outside walmanager's own tests so that backend packages can call
// it with their unexported test clusters (kfake, the Pulsar test broker)
// without walmanager importing any backend.
package walmanagertest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walmanager"
)

// TakeoverOptions tune RunTakeover. The zero value takes every default.
type TakeoverOptions struct {
	// Backend names the backend in logs. Default "backend".
	Backend string
	// Channel is the channel taken over. Default "takeover".
	Channel string
	// Takeovers is how many times ownership moves. Default 50, or 10 under
	// -short.
	Takeovers int
	// Appenders is how many goroutines append on the owner. Default 4.
	Appenders int
	// AppendPause is each appender's pause between appends; it keeps the
	// load light on a shared machine. Default 500µs.
	AppendPause time.Duration
	// RunBefore is how long the owner's appenders run before the takeover.
	// Default 5ms.
	RunBefore time.Duration
	// Timeout bounds every single wait of the scenario (an Open, the old
	// owner noticing the fence, a scanner reaching the end). Default 30s.
	Timeout time.Duration
	// WAL is the base of the options every WAL of the scenario is opened
	// with; a nil Logger discards the logs.
	WAL adaptor.Options
}

func (o TakeoverOptions) withDefaults() TakeoverOptions {
	if o.Backend == "" {
		o.Backend = "backend"
	}
	if o.Channel == "" {
		o.Channel = "takeover"
	}
	if o.Takeovers == 0 {
		o.Takeovers = 50
		if testing.Short() {
			o.Takeovers = 10
		}
	}
	if o.Appenders == 0 {
		o.Appenders = 4
	}
	if o.AppendPause == 0 {
		o.AppendPause = 500 * time.Microsecond
	}
	if o.RunBefore == 0 {
		o.RunBefore = 5 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.WAL.Logger == nil {
		o.WAL.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// TakeoverResult is what RunTakeover measured.
type TakeoverResult struct {
	// Durations are the takeover times (the new owner's Manager.Open
	// call), sorted ascending.
	Durations []time.Duration
	// P50, P99 and Max summarize Durations (nearest rank; with 50
	// takeovers P99 is the slowest one).
	P50, P99, Max time.Duration
	// Acknowledged counts the appends that succeeded, over all terms.
	Acknowledged int
	// AckedAcrossFence counts appends that were called before a takeover's
	// Open returned and acknowledged after it. They are legal (the backend
	// stored them before the new term-begin, which the scenario checks);
	// the count shows how often the race was exercised.
	AckedAcrossFence int
	// Rejected counts appends that failed because their owner was fenced.
	Rejected int
}

// RunTakeover runs the two-node takeover scenario on a channel of one
// backend. a and b are two nodes of that backend: each gets its own
// walmanager.Manager. Node a opens term 1; then, Takeovers times, the other
// node opens the next term while the owner's appenders are running, and the
// scenario checks:
//
//   - no append called after the new owner's Open returned is acknowledged,
//     and every append acknowledged at all lies before the next term's
//     term-begin in the log and is delivered by every scanner;
//   - the old owner's manager notices the fence on its own (the channel
//     turns unavailable with a reason);
//   - no scanner on either node — one tailing from the start, one catching
//     up at the end — delivers a data message of a term after the
//     term-begin of a higher one.
//
// It logs and returns the takeover time p50/p99. The backend must declare
// Capabilities.Fencing: without it a stale owner's appends are acknowledged
// until it notices the new term, and the scenario skips. RunTakeover closes
// its managers and WALs but not a and b.
func RunTakeover(t *testing.T, a, b walimpls.Opener, opts TakeoverOptions) TakeoverResult {
	t.Helper()
	opts = opts.withDefaults()
	if !a.Capabilities().Fencing || !b.Capabilities().Fencing {
		t.Skipf("%s: the backend does not fence lower terms, so a stale owner's appends may be acknowledged", opts.Backend)
	}
	nodes := [2]*node{newNode(t, "A", a, opts), newNode(t, "B", b, opts)}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
		defer cancel()
		for _, n := range nodes {
			require.NoError(t, n.mgr.Close(ctx), "node %s: manager close", n.name)
		}
	}()

	ch := func(term int64) walmanager.Channel { return walmanager.Channel{Name: opts.Channel, Term: term} }
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	require.NoError(t, nodes[0].mgr.Open(ctx, ch(1)), "node A: first open")
	cancel()

	// One scanner per node tails the log through every takeover.
	var live [2]*logReader
	for i, n := range nodes {
		live[i] = startReader(t, n, "live", opts)
		defer live[i].close(t)
	}

	var res TakeoverResult
	var acked []ack
	for i := range opts.Takeovers {
		owner, next := nodes[i%2], nodes[(i+1)%2]
		term := int64(i + 1)
		w, err := owner.mgr.GetAvailableWAL(ch(term))
		require.NoError(t, err, "takeover %d: node %s", i, owner.name)
		stop := make(chan struct{})
		wait := runAppenders(w, term, opts, stop)
		time.Sleep(opts.RunBefore)

		octx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
		start := time.Now()
		err = next.mgr.Open(octx, ch(term+1))
		returned := time.Now()
		cancel()
		if err != nil {
			dumpState(t, nodes[:], opts.Channel)
		}
		require.NoError(t, err, "takeover %d: node %s opens term %d", i, next.name, term+1)
		res.Durations = append(res.Durations, returned.Sub(start))

		// Appenders end at their first failure; the ones that were between
		// appends when the fence came learn it from their next append,
		// which stop makes sure they try soon.
		time.Sleep(2 * time.Millisecond)
		close(stop)
		for _, r := range wait() {
			switch {
			case r.err == nil:
				require.False(t, r.call.After(returned),
					"takeover %d: an append of term %d called after term %d opened was acknowledged (%s)", i, term, term+1, r.payload)
				res.Acknowledged++
				if r.ret.After(returned) {
					res.AckedAcrossFence++
				}
				acked = append(acked, ack{payload: r.payload, id: r.id, term: term})
			case errors.Is(r.err, walimpls.ErrFenced), errors.Is(r.err, walimpls.ErrClosed):
				res.Rejected++
			default:
				require.NoError(t, r.err, "takeover %d: an append of term %d failed for another reason than the fence", i, term)
			}
		}

		// The old owner's manager notices the fence on its own.
		require.Eventually(t, func() bool {
			st, ok := statusOf(owner.mgr, opts.Channel)
			return ok && st.State == walmanager.StateUnavailable && st.LastError != nil
		}, opts.Timeout, time.Millisecond, "takeover %d: node %s did not notice the fence", i, owner.name)
		_, err = owner.mgr.GetAvailableWAL(ch(term))
		require.ErrorIs(t, err, walmanager.ErrChannelNotAvailable, "takeover %d: node %s", i, owner.name)
		// The coordinator tells the old owner to let go.
		rctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
		require.NoError(t, owner.mgr.Remove(rctx, ch(term)), "takeover %d: node %s removes term %d", i, owner.name, term)
		cancel()
	}

	// The last owner writes an end marker and releases it; every scanner
	// reads up to it.
	lastTerm := int64(opts.Takeovers + 1)
	w, err := nodes[opts.Takeovers%2].mgr.GetAvailableWAL(ch(lastTerm))
	require.NoError(t, err)
	ectx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	endRes, err := w.Append(ectx, mustMessage(t, endPayload))
	require.NoError(t, err, "end marker")
	require.NoError(t, w.Sync(ectx), "end marker watermark")
	cancel()
	acked = append(acked, ack{payload: endPayload, id: endRes.ID, term: lastTerm})

	for i, n := range nodes {
		checkLog(t, n.name+" tailing", live[i].wait(t), acked, lastTerm)
		catchUp := startReader(t, n, "catch-up", opts)
		checkLog(t, n.name+" catch-up", catchUp.wait(t), acked, lastTerm)
		catchUp.close(t)
	}

	slices.Sort(res.Durations)
	res.P50, res.P99, res.Max = percentile(res.Durations, 0.50), percentile(res.Durations, 0.99), res.Durations[len(res.Durations)-1]
	t.Logf("%s: takeover (new owner's Open) over %d takeovers: p50 %s, p99 %s, max %s; %d appends acknowledged (%d across the fence), %d rejected",
		opts.Backend, opts.Takeovers, res.P50, res.P99, res.Max, res.Acknowledged, res.AckedAcrossFence, res.Rejected)
	return res
}

const endPayload = "end"

// percentile returns the nearest-rank p-quantile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// node is one streaming node: its own backend client and its own manager.
type node struct {
	name    string
	backend walimpls.Opener
	mgr     *walmanager.Manager
}

func newNode(t *testing.T, name string, backend walimpls.Opener, opts TakeoverOptions) *node {
	t.Helper()
	open := walmanager.WALOpenerFunc(func(ctx context.Context, ch adaptor.Channel) (adaptor.WAL, error) {
		return adaptor.Open(ctx, backend, ch, opts.WAL)
	})
	mgr, err := walmanager.New(open, walmanager.Options{CloseGracePeriod: opts.Timeout, Logger: opts.WAL.Logger})
	require.NoError(t, err)
	return &node{name: name, backend: backend, mgr: mgr}
}

// dumpState logs what a failed wait leaves behind: each node's view of the
// channel and every goroutine's stack, which shows where an open is stuck.
func dumpState(t *testing.T, nodes []*node, channel string) {
	t.Helper()
	for _, n := range nodes {
		st, ok := statusOf(n.mgr, channel)
		t.Logf("node %s: status %+v (known %v)", n.name, st, ok)
	}
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	t.Logf("goroutines:\n%s", b.String())
}

func statusOf(m *walmanager.Manager, name string) (walmanager.ChannelStatus, bool) {
	for _, st := range m.Channels() {
		if st.Name == name {
			return st, true
		}
	}
	return walmanager.ChannelStatus{}, false
}

func mustMessage(t *testing.T, payload string) message.Message {
	t.Helper()
	m, err := message.New([]byte(payload), nil)
	require.NoError(t, err)
	return m
}

// appendRecord is one Append of an appender: when it was called, when it
// returned, and how.
type appendRecord struct {
	payload   string
	call, ret time.Time
	id        message.ID
	err       error
}

// ack is an acknowledged append: where the backend stored it.
type ack struct {
	payload string
	id      message.ID
	term    int64
}

// runAppenders appends to w from opts.Appenders goroutines until their first
// failure (the owner is fenced) or stop, and returns a wait for what
// happened. Payloads are unique across the scenario.
func runAppenders(w adaptor.WAL, term int64, opts TakeoverOptions, stop <-chan struct{}) func() []appendRecord {
	var mu sync.Mutex
	var recs []appendRecord
	var wg sync.WaitGroup
	for g := range opts.Appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				r := appendRecord{payload: fmt.Sprintf("t%d-a%d-%d", term, g, seq)}
				m, err := message.New([]byte(r.payload), nil)
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
					r.call = time.Now()
					var res adaptor.AppendResult
					res, err = w.Append(ctx, m)
					r.ret = time.Now()
					cancel()
					r.id = res.ID
				}
				r.err = err
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
				if err != nil {
					return
				}
				time.Sleep(opts.AppendPause)
			}
		}()
	}
	return func() []appendRecord {
		wg.Wait()
		return recs
	}
}

// seen is one message a scanner delivered.
type seen struct {
	kind    message.Kind
	term    int64
	id      message.ID
	payload string
}

// logReader scans the whole log from a read-only WAL on one node until the
// end marker, recording data messages and term-begins in delivery order.
type logReader struct {
	node string
	wal  adaptor.WAL
	scan walimpls.Scanner
	done chan struct{}
	got  []seen
	err  error
}

func startReader(t *testing.T, n *node, name string, opts TakeoverOptions) *logReader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	ro := opts.WAL
	ro.ReadOnly = true
	w, err := adaptor.Open(ctx, n.backend, adaptor.Channel{Name: opts.Channel}, ro)
	require.NoError(t, err, "node %s: read-only open", n.name)
	s, err := w.Read(ctx, adaptor.ReadOption{Name: name, Filter: adaptor.Filter{Kinds: []message.Kind{message.KindData, message.KindTermBegin}}})
	if err != nil {
		_ = w.Close()
		require.NoError(t, err, "node %s: read", n.name)
	}
	r := &logReader{node: n.name, wal: w, scan: s, done: make(chan struct{})}
	go r.run(opts.Timeout)
	return r
}

// run owns got and err until done closes.
func (r *logReader) run(idle time.Duration) {
	defer close(r.done)
	// A watchdog per message rather than one for the whole run: the live
	// reader lives through every takeover.
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-r.scan.Chan():
			if !ok {
				r.err = errors.Wrap(cmp.Or(r.scan.Error(), errors.New("closed")), "scanner ended before the end marker")
				return
			}
			term, _ := m.Term()
			r.got = append(r.got, seen{kind: m.Kind(), term: term, id: m.ID(), payload: string(m.Payload())})
			if m.Kind() == message.KindData && string(m.Payload()) == endPayload {
				return
			}
			timer.Reset(idle)
		case <-timer.C:
			r.err = errors.Newf("no message for %s", idle)
			return
		}
	}
}

func (r *logReader) wait(t *testing.T) []seen {
	t.Helper()
	<-r.done
	require.NoError(t, r.err, "node %s (%d messages read)", r.node, len(r.got))
	return r.got
}

func (r *logReader) close(t *testing.T) {
	t.Helper()
	require.NoError(t, r.scan.Close())
	<-r.done
	require.NoError(t, r.wal.Close())
}

// checkLog checks what one scanner delivered: no data message of a term
// after the term-begin of a higher term, neither in delivery order nor in
// log position; every acknowledged append delivered once, at the ID its
// append returned.
func checkLog(t *testing.T, who string, got []seen, acked []ack, lastTerm int64) {
	t.Helper()
	fence := int64(-1)
	begins := map[int64]message.ID{}
	delivered := map[string]message.ID{}
	for _, m := range got {
		if m.kind == message.KindTermBegin {
			fence = max(fence, m.term)
			begins[m.term] = m.id
			continue
		}
		require.GreaterOrEqual(t, m.term, fence, "%s: data %q of term %d delivered after the term-begin of %d", who, m.payload, m.term, fence)
		_, dup := delivered[m.payload]
		require.False(t, dup, "%s: %q delivered twice", who, m.payload)
		delivered[m.payload] = m.id
	}
	require.Equal(t, lastTerm, fence, "%s: the last term-begin delivered", who)
	for _, m := range got {
		if next, ok := begins[m.term+1]; ok && m.kind == message.KindData {
			require.True(t, m.id.LT(next), "%s: data %q of term %d at %s, after the term-begin of %d at %s", who, m.payload, m.term, m.id, m.term+1, next)
		}
	}
	for _, a := range acked {
		id, ok := delivered[a.payload]
		require.True(t, ok, "%s: acknowledged append %q (term %d, %s) was not delivered", who, a.payload, a.term, a.id)
		require.True(t, id.EQ(a.id), "%s: %q delivered at %s, acknowledged at %s", who, a.payload, id, a.id)
	}
	t.Logf("%s: %d data messages and %d term-begins delivered in term order", who, len(delivered), len(begins))
}
