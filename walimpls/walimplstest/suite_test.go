package walimplstest_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// brokenEnv selects the deliberately broken backend the child run uses.
const brokenEnv = "WALIMPLSTEST_BROKEN"

// brokenLimit is the size limit every broken backend declares, so that the
// SizeLimit part runs.
const brokenLimit = 64 << 10

// breakages lists each deliberately broken backend and the parts of the
// suite that must fail it. Each models a bug a real backend could have.
var breakages = []struct {
	broken   string
	mustFail []string
}{
	{"none", nil}, // the wrapper unbroken: the whole suite passes
	{"drop-every-10th", []string{"ConcurrentAppendRead", "DeliverPolicies"}},
	{"reverse-ids", []string{"ConcurrentAppendRead", "IDOrder"}},
	{"lose-properties", []string{"ConcurrentAppendRead"}},
	{"stamp-32-bit-term", []string{"ConcurrentAppendRead", "AppendBatch"}},
	{"stamp-32-bit-timetick", []string{"ConcurrentAppendRead", "AppendBatch"}},
	{"batch-reversed", []string{"AppendBatch"}},
	{"batch-stores-prefix", []string{"AppendBatch"}},
	{"lenient-ids", []string{"CanonicalIDs"}},
	{"last-off-by-one", []string{"Last"}},
	{"skip-truncated", []string{"Truncate"}},
	{"truncate-off-by-one", []string{"Truncate", "TruncateBoundaries"}},
	{"truncate-one-past-end", []string{"TruncateBoundaries"}},
	{"unbounded-read-ahead", []string{"TruncateOvertakesScanner"}},
	{"overtaken-skips", []string{"TruncateOvertakesScanner"}},
	{"future-clamps", []string{"FuturePosition"}},
	{"lazy-latest", []string{"LatestStartsAtRead"}},
	{"tail-starts-late", []string{"DeliverTail"}},
	{"tail-from-latest", []string{"DeliverTail"}},
	{"tail-ignores-truncation", []string{"DeliverTail"}},
	{"tail-accepts-zero", []string{"DeliverTail"}},
	{"tail-not-tailing", []string{"DeliverTail"}},
	{"polling-tail", []string{"IdleTail"}},
	{"scanner-bound-to-read-ctx", []string{"ScannerOutlivesReadContext"}},
	{"size-payload-only", []string{"SizeLimit"}},
	{"size-off-by-one", []string{"SizeLimit"}},
	{"case-insensitive-names", []string{"ChannelNames"}},
	{"shared-log", []string{"ParallelChannels"}},
	{"close-is-noop", []string{"Lifecycle"}},
	{"opener-close-keeps-wals", []string{"OpenerClose"}},
	{"readonly-writes", []string{"ReadOnly", "ReadOnlyCreatesNothing"}},
	{"readonly-creates", []string{"ReadOnlyCreatesNothing"}},
	{"ignore-context", []string{"Context"}},
	{"leak-scanner-goroutine", []string{"ScannerContract"}},
	{"chan-never-closes", []string{"ScannerContract"}},
	{"scanner-close-hangs", []string{"ScannerContract"}},
	{"no-fencing-declared-fencing", []string{"Fencing", "SameTermTakeover"}},
	{"same-term-both-write", []string{"SameTermTakeover"}},
	{"fenced-truncate", []string{"Fencing", "SameTermTakeover"}},
	{"refused-open-writes", []string{"RefusedOpen"}},
	{"keeps-caller-buffers", []string{"CallerBuffers"}},
	{"delete-is-noop", []string{"Delete", "DeleteFencesOtherNodes"}},
	{"delete-missing-fails", []string{"Delete"}},
	{"delete-keeps-term", []string{"Delete", "DeleteFencesOtherNodes"}},
	{"delete-keeps-messages", []string{"Delete", "DeleteFencesOtherNodes"}},
	{"delete-writer-reaches-new-channel", []string{"Delete", "DeleteFencesOtherNodes"}},
	{"batches-empty-slice", []string{"Batches/ConcurrentAppendRead", "Batches/DeliverPolicies"}},
	{"batches-drop-last", []string{"Batches/ConcurrentAppendRead", "Batches/DeliverPolicies"}},
	{"async-done-twice", []string{"Async/AppendBatch", "Async/AsyncPipeline"}},
	{"async-swap", []string{"Async/AsyncPipeline"}},
	{"hides-batch-reader", []string{"DeclaredInterfaces", "Batches/ConcurrentAppendRead", "Batches/Truncate"}},
	{"hides-async-appender", []string{"DeclaredInterfaces", "Async/AppendBatch", "Async/AsyncPipeline"}},
	{"undeclared-async-appender", []string{"DeclaredInterfaces"}},
}

// TestSuiteCatchesBrokenBackends runs the suite, in a child process, against
// memory backends broken on purpose, and checks that it fails them in the
// parts that should notice, within a bounded time (a broken backend must
// fail a part, not hang the run); and that the unbroken wrapper passes the
// whole suite, so the failures come from the breakage.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite once per broken backend, in child processes")
	}
	for _, c := range breakages {
		t.Run(c.broken, func(t *testing.T) {
			t.Parallel()
			run := "^TestBrokenBackendChild$"
			if c.mustFail != nil {
				// go test matches each level of a subtest's name apart:
				// parts under Batches or Async need a level of their own,
				// which a part without subtests of its own ignores.
				var groups, grouped []string
				for _, p := range c.mustFail {
					group, part, ok := strings.Cut(p, "/")
					if !slices.Contains(groups, group) {
						groups = append(groups, group)
					}
					if ok {
						grouped = append(grouped, part)
					}
				}
				run += "/^(" + strings.Join(groups, "|") + ")$"
				if grouped != nil {
					run += "/^(" + strings.Join(grouped, "|") + ")$"
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.broken)
			out, err := cmd.CombinedOutput()
			require.NoErrorf(t, ctx.Err(), "the suite hung on a backend that is %s instead of failing it:\n%s", c.broken, out)
			if c.mustFail == nil {
				require.NoError(t, err, "the unbroken wrapper fails the suite:\n%s", out)
				return
			}
			require.Error(t, err, "the suite passed a backend that is %s:\n%s", c.broken, out)
			for _, part := range c.mustFail {
				re := regexp.MustCompile(`--- FAIL: TestBrokenBackendChild/` + part + ` `)
				require.Truef(t, re.Match(out), "part %s did not fail for %s:\n%s", part, c.broken, out)
			}
		})
	}
}

// TestBrokenBackendChild is the child of TestSuiteCatchesBrokenBackends.
func TestBrokenBackendChild(t *testing.T) {
	broken := os.Getenv(brokenEnv)
	if broken == "" {
		t.Skip("child process of TestSuiteCatchesBrokenBackends")
	}
	walimplstest.Run(t, func(t *testing.T) walimplstest.Cluster {
		return brokenCluster{c: memory.NewCluster(), broken: broken, names: &brokenNames{
			maxTerm: map[string]int64{}, deleted: map[string]bool{}}}
	}, walimplstest.WithWaitTimeout(2*time.Second), walimplstest.Implements(declared(broken)...))
}

// offered says which optional interfaces of memory's WALs the wrapper of a
// breakage passes on: both for "none", the one a "batches-" or "async-"
// breakage breaks, what the breakages of declarations say, and none for
// the others, whose breakages are in the plain parts.
func offered(broken string) (batches, async bool) {
	switch broken {
	case "none":
		return true, true
	case "hides-batch-reader":
		// ReadBatches lost to a signature drift: the WAL is no
		// BatchReader any more.
		return false, true
	case "hides-async-appender":
		return true, false
	case "undeclared-async-appender":
		return false, true
	}
	return strings.HasPrefix(broken, "batches-"), strings.HasPrefix(broken, "async-")
}

// declared is what the child declares to the suite: what the wrapper
// offers, except for the breakages of declarations.
func declared(broken string) []walimplstest.Feature {
	batches, async := offered(broken)
	switch broken {
	case "hides-batch-reader", "hides-async-appender":
		// Declares what it no longer implements.
		batches, async = true, true
	case "undeclared-async-appender":
		// Implements what its test forgot to declare.
		async = false
	}
	var fs []walimplstest.Feature
	if batches {
		fs = append(fs, walimplstest.BatchRead)
	}
	if async {
		fs = append(fs, walimplstest.AsyncAppend)
	}
	return fs
}

type brokenCluster struct {
	c      *memory.Cluster
	broken string
	names  *brokenNames
}

// brokenNames is what the delete breakages remember of the cluster's
// channels, across its openers.
type brokenNames struct {
	mu      sync.Mutex
	maxTerm map[string]int64 // highest term opened ReadWrite
	deleted map[string]bool  // delete-keeps-messages: deleted, messages kept
	kept    sync.Map         // keeps-caller-buffers: ID string → the caller's message
}

func (b brokenCluster) NewOpener(t *testing.T) walimpls.Opener {
	cfg := memory.Config{MaxMessageBytes: brokenLimit, Cluster: b.c}
	if b.broken == "size-payload-only" || b.broken == "size-off-by-one" {
		cfg.MaxMessageBytes = 0 // the wrapper checks the limit, wrongly
	}
	o, err := memory.New(context.Background(), cfg)
	require.NoError(t, err)
	bo := &brokenOpener{Opener: o, cluster: b.c, broken: b.broken, names: b.names}
	if b.broken == "opener-close-keeps-wals" {
		bo.hidden, err = memory.New(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = bo.hidden.Close() })
	}
	return bo
}

type brokenOpener struct {
	*memory.Opener
	cluster *memory.Cluster
	broken  string
	hidden  *memory.Opener // opener-close-keeps-wals: opens WALs its Close does not reach
	names   *brokenNames
}

func (o *brokenOpener) Delete(ctx context.Context, name string) error {
	n := o.names
	switch o.broken {
	case "delete-is-noop":
		return walimpls.ValidateChannelName(name)
	case "delete-missing-fails":
		n.mu.Lock()
		_, known := n.maxTerm[name]
		n.mu.Unlock()
		if !known {
			return errors.Newf("delete %q: no such channel", name)
		}
	case "delete-keeps-messages":
		// Fences the writers, keeps the log.
		if err := walimpls.ValidateChannelName(name); err != nil {
			return err
		}
		n.mu.Lock()
		n.deleted[name] = true
		n.mu.Unlock()
		return nil
	case "delete-keeps-term":
		// The log goes, the term stays.
		n.mu.Lock()
		term, known := n.maxTerm[name]
		n.mu.Unlock()
		err := o.Opener.Delete(ctx, name)
		if known && err == nil {
			n.mu.Lock()
			n.maxTerm[name] = term
			n.mu.Unlock()
		}
		return err
	}
	err := o.Opener.Delete(ctx, name)
	if err == nil {
		n.mu.Lock()
		delete(n.maxTerm, name)
		n.mu.Unlock()
	}
	return err
}

func (o *brokenOpener) Capabilities() walimpls.Capabilities {
	caps := o.Opener.Capabilities()
	caps.MaxMessageBytes = brokenLimit
	if o.broken == "no-fencing-declared-fencing" {
		caps.Fencing = true // a lie: the cluster's fencing is off
	}
	return caps
}

// unfenced runs fn with the cluster's fencing off: how the breakages below
// let a stale writer through.
func (o *brokenOpener) unfenced(fn func()) {
	o.cluster.SetFencing(false)
	defer o.cluster.SetFencing(true)
	fn()
}

func (o *brokenOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	asked := ch
	switch o.broken {
	case "no-fencing-declared-fencing":
		o.cluster.SetFencing(false)
	case "case-insensitive-names":
		ch.Name = strings.ToLower(ch.Name)
	case "shared-log":
		if ch.Validate() == nil {
			ch.Name = "the-one-log"
		}
	case "readonly-writes":
		ch.Mode = walimpls.ReadWrite
	case "readonly-creates":
		if ch.Mode == walimpls.ReadOnly && ch.Validate() == nil {
			// Like a broker that creates a topic on use: the channel
			// exists (empty) from now on.
			if w, err := o.Opener.Open(ctx, walimpls.Channel{Name: ch.Name, Term: 0}); err == nil {
				_ = w.Close()
			}
		}
	}
	if ch.Validate() == nil {
		n := o.names
		n.mu.Lock()
		term, known := n.maxTerm[ch.Name]
		if o.broken == "delete-keeps-term" && known && ch.Mode == walimpls.ReadWrite && ch.Term < term {
			n.mu.Unlock()
			return nil, &walimpls.FencedError{Channel: ch.Name, Term: ch.Term, CurrentTerm: term}
		}
		if ch.Mode == walimpls.ReadWrite && (!known || ch.Term > term) {
			n.maxTerm[ch.Name] = ch.Term
		} else if !known {
			n.maxTerm[ch.Name] = -1
		}
		n.mu.Unlock()
	}
	opener := o.Opener
	if o.hidden != nil {
		if _, err := o.Opener.Open(ctx, ch); err != nil { // closed state and validation
			return nil, err
		}
		opener = o.hidden
	}
	w, err := opener.Open(ctx, ch)
	if o.broken == "refused-open-writes" && errors.Is(err, walimpls.ErrFenced) {
		// The refused open leaves a record in the log anyway.
		o.unfenced(func() {
			if stale, oerr := o.Opener.Open(ctx, ch); oerr == nil {
				_, _ = walimpls.Append(ctx, stale, message.Message{})
				_ = stale.Close()
			}
		})
	}
	if err != nil {
		return nil, err
	}
	bw := &brokenWAL{WALImpl: w, asked: asked, o: o, broken: o.broken}
	offersBatches, offersAsync := offered(o.broken)
	br, batches := w.(walimpls.BatchReader)
	batches = batches && offersBatches
	aa, async := w.(walimpls.AsyncAppender)
	async = async && offersAsync
	switch {
	case batches && async:
		return &brokenBatchAsyncWAL{brokenBatchWAL: &brokenBatchWAL{brokenWAL: bw, br: br}, async: &brokenAsyncWAL{brokenWAL: bw, aa: aa}}, nil
	case batches:
		return &brokenBatchWAL{brokenWAL: bw, br: br}, nil
	case async:
		return &brokenAsyncWAL{brokenWAL: bw, aa: aa}, nil
	}
	return bw, nil
}

// brokenAsyncWAL is a brokenWAL that offers asynchronous appends: unbroken
// for "none", broken for the "async-" breakages.
type brokenAsyncWAL struct {
	*brokenWAL
	aa walimpls.AsyncAppender

	mu   sync.Mutex
	held func() // async-swap: the batch held back until the next one
}

func (w *brokenAsyncWAL) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	switch w.broken {
	case "async-done-twice":
		// Answers every batch twice, as a retry loop that forgot it had
		// answered might.
		w.aa.AppendBatchAsync(ctx, msgs, func(ids []message.ID, err error) {
			done(ids, err)
			done(ids, err)
		})
	case "async-swap":
		// Stores each pair of batches handed over back to back in the
		// wrong order; a batch left alone goes after a while.
		store := func() { ids, err := w.WALImpl.AppendBatch(ctx, msgs); done(ids, err) }
		w.mu.Lock()
		held := w.held
		w.held = nil
		if held == nil {
			w.held = store
			time.AfterFunc(50*time.Millisecond, func() {
				w.mu.Lock()
				alone := w.held
				w.held = nil
				w.mu.Unlock()
				if alone != nil {
					alone()
				}
			})
		}
		w.mu.Unlock()
		if held != nil {
			store()
			held()
		}
	default:
		w.aa.AppendBatchAsync(ctx, msgs, done)
	}
}

// brokenBatchAsyncWAL offers both batch scanners and asynchronous appends.
type brokenBatchAsyncWAL struct {
	*brokenBatchWAL
	async *brokenAsyncWAL
}

func (w *brokenBatchAsyncWAL) AppendBatchAsync(ctx context.Context, msgs []message.Message, done func([]message.ID, error)) {
	w.async.AppendBatchAsync(ctx, msgs, done)
}

// brokenBatchWAL is a brokenWAL that offers batch scanners: unbroken for
// "none", broken for the "batches-" breakages.
type brokenBatchWAL struct {
	*brokenWAL
	br walimpls.BatchReader
}

func (w *brokenBatchWAL) ReadBatches(ctx context.Context, opt walimpls.ReadOption) (walimpls.BatchScanner, error) {
	inner, err := w.br.ReadBatches(ctx, opt)
	if err != nil || w.broken == "none" {
		return inner, err
	}
	s := &brokenBatches{inner: inner, broken: w.broken, out: make(chan []message.Immutable), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s, nil
}

// brokenBatches forwards an inner batch scanner, breaking it on purpose.
type brokenBatches struct {
	inner  walimpls.BatchScanner
	broken string
	out    chan []message.Immutable
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func (s *brokenBatches) run() {
	defer close(s.done)
	defer close(s.out)
	for batch := range s.inner.Batches() {
		var send [][]message.Immutable
		switch s.broken {
		case "batches-empty-slice":
			// An empty slice after every real one.
			send = [][]message.Immutable{batch, nil}
		case "batches-drop-last":
			// Loses the last message of every slice of several.
			if len(batch) > 1 {
				batch = batch[:len(batch)-1]
			}
			send = [][]message.Immutable{batch}
		}
		for _, b := range send {
			select {
			case s.out <- b:
			case <-s.stop:
			}
		}
	}
}

func (s *brokenBatches) Batches() <-chan []message.Immutable { return s.out }
func (s *brokenBatches) Done() <-chan struct{}               { return s.done }

func (s *brokenBatches) Error() error {
	select {
	case <-s.done:
		return s.inner.Error()
	default:
		return nil
	}
}

func (s *brokenBatches) Close() error {
	s.once.Do(func() { close(s.stop) })
	_ = s.inner.Close()
	<-s.done
	return nil
}

func (o *brokenOpener) UnmarshalID(s string) (message.ID, error) {
	switch o.broken {
	case "lenient-ids":
		if v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil && v >= 0 {
			return message.NewSeqID(memory.Name, v), nil
		}
	case "reverse-ids":
		id, err := o.Opener.UnmarshalID(s)
		if err != nil {
			return id, err
		}
		return message.NewID(reversed{id.Value()}), nil
	}
	return o.Opener.UnmarshalID(s)
}

type brokenWAL struct {
	walimpls.WALImpl
	asked  walimpls.Channel
	o      *brokenOpener
	broken string
}

func (w *brokenWAL) Channel() walimpls.Channel { return w.asked }

// AppendBatch carries every append breakage: the suite appends one message
// through walimpls.Append, which is AppendBatch of one.
func (w *brokenWAL) AppendBatch(ctx context.Context, msgs []message.Message) ([]message.ID, error) {
	switch w.broken {
	case "batch-reversed":
		// Stores the batch back to front, and answers in slice order.
		rev := make([]message.Message, len(msgs))
		for i, m := range msgs {
			rev[len(msgs)-1-i] = m
		}
		ids, err := w.WALImpl.AppendBatch(ctx, rev)
		for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
			ids[i], ids[j] = ids[j], ids[i]
		}
		return ids, err
	case "batch-stores-prefix":
		// Checks sizes one by one while storing: what comes before a
		// message too large is stored anyway.
		var ids []message.ID
		for _, m := range msgs {
			id, err := walimpls.Append(ctx, w.WALImpl, m)
			if err != nil {
				return ids, err
			}
			ids = append(ids, id)
		}
		return ids, nil
	case "ignore-context":
		ctx = context.Background()
	case "lose-properties":
		// Stores drop properties with empty values and reserved keys.
		msgs = mapMessages(msgs, func(m message.Message) message.Message {
			props := map[string]string{}
			for k, v := range m.Properties().All() {
				if v != "" && !message.IsReserved(k) {
					props[k] = v
				}
			}
			return message.Restore(m.Payload(), props)
		})
	case "size-payload-only":
		for _, m := range msgs {
			if len(m.Payload()) > brokenLimit {
				return nil, &walimpls.TooLargeError{Size: len(m.Payload()), Limit: brokenLimit}
			}
		}
	case "size-off-by-one":
		for _, m := range msgs {
			if m.Size() >= brokenLimit {
				return nil, &walimpls.TooLargeError{Size: m.Size(), Limit: brokenLimit}
			}
		}
	case "stamp-32-bit-term", "stamp-32-bit-timetick":
		msgs = mapMessages(msgs, func(m message.Message) message.Message { return narrowStamp(w.broken, m) })
	case "delete-keeps-messages":
		w.o.names.mu.Lock()
		deleted := w.o.names.deleted[w.asked.Name]
		w.o.names.mu.Unlock()
		if deleted {
			return nil, walimpls.MarkNotStored(&walimpls.FencedError{Channel: w.asked.Name, Term: w.asked.Term, Deleted: true})
		}
	}
	ids, err := w.WALImpl.AppendBatch(ctx, msgs)
	var fe *walimpls.FencedError
	if w.broken == "delete-writer-reaches-new-channel" && errors.As(err, &fe) && fe.Deleted {
		// The writer reconnects and finds a channel of its name.
		w.o.unfenced(func() {
			if nw, oerr := w.o.Opener.Open(ctx, w.asked); oerr == nil {
				ids, err = nw.AppendBatch(ctx, msgs)
				_ = nw.Close()
			}
		})
	}
	if w.broken == "same-term-both-write" && errors.As(err, &fe) && fe.CurrentTerm == fe.Term {
		// A same-term claim is not checked: the earlier writer goes on.
		w.o.unfenced(func() { ids, err = w.WALImpl.AppendBatch(ctx, msgs) })
	}
	if err == nil && w.broken == "reverse-ids" {
		for i, id := range ids {
			ids[i] = message.NewID(reversed{id.Value()})
		}
	}
	if w.broken == "keeps-caller-buffers" {
		// Serves reads from the caller's own payload and map.
		for i, id := range ids {
			w.o.names.kept.Store(id.String(), msgs[i])
		}
	}
	return ids, err
}

// mapMessages returns f of each message, leaving msgs as they were.
func mapMessages(msgs []message.Message, f func(message.Message) message.Message) []message.Message {
	out := make([]message.Message, len(msgs))
	for i, m := range msgs {
		out[i] = f(m)
	}
	return out
}

// narrowStamp stores a stamp's term in an int32 (stamp-32-bit-term) or
// its timetick in a uint32 (stamp-32-bit-timetick), as a backend with a
// 32-bit field would: values that fit come back as they were.
func narrowStamp(broken string, m message.Message) message.Message {
	switch broken {
	case "stamp-32-bit-term":
		if term, ok := m.Term(); ok && int64(int32(term)) != term {
			m = m.WithTerm(int64(int32(term)))
		}
	case "stamp-32-bit-timetick":
		if tt, ok := m.TimeTick(); ok && uint64(uint32(tt)) != tt {
			m = m.WithTimeTick(uint64(uint32(tt)))
		}
	}
	return m
}

func (w *brokenWAL) Truncate(ctx context.Context, upTo message.ID) error {
	seq, serr := message.SeqOf(memory.Name, upTo)
	switch {
	case w.broken == "truncate-off-by-one" && serr == nil:
		// Removes upTo too.
		return w.WALImpl.Truncate(ctx, message.NewSeqID(memory.Name, seq+1))
	case w.broken == "truncate-one-past-end" && serr == nil:
		// Truncating to the position the next append gets removes all but
		// the last message instead of failing.
		err := w.WALImpl.Truncate(ctx, upTo)
		if last, lerr := w.WALImpl.Last(ctx); errors.Is(err, walimpls.ErrInvalidPosition) && lerr == nil && !last.IsZero() {
			if ls, _ := message.SeqOf(memory.Name, last); ls+1 == seq {
				return w.WALImpl.Truncate(ctx, last)
			}
		}
		return err
	case w.broken == "fenced-truncate":
		err := w.WALImpl.Truncate(ctx, upTo)
		if errors.Is(err, walimpls.ErrFenced) {
			w.o.unfenced(func() { err = w.WALImpl.Truncate(ctx, upTo) })
		}
		return err
	}
	return w.WALImpl.Truncate(ctx, upTo)
}

func (w *brokenWAL) Last(ctx context.Context) (message.ID, error) {
	id, err := w.WALImpl.Last(ctx)
	if w.broken == "last-off-by-one" && err == nil && !id.IsZero() {
		if seq, _ := message.SeqOf(memory.Name, id); seq > 0 {
			return message.NewSeqID(memory.Name, seq-1), nil
		}
	}
	return id, err
}

func (w *brokenWAL) Close() error {
	if w.broken == "close-is-noop" {
		return nil
	}
	return w.WALImpl.Close()
}

func (w *brokenWAL) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	p := opt.DeliverPolicy
	switch w.broken {
	case "reverse-ids":
		if id, incl, ok := p.StartID(); ok {
			if r, isRev := id.Value().(reversed); isRev {
				id = message.NewID(r.IDValue)
			}
			if incl {
				opt.DeliverPolicy = cursor.StartFrom(id)
			} else {
				opt.DeliverPolicy = cursor.StartAfter(id)
			}
		}
	case "skip-truncated":
		// Turn a truncated start position into "start at the first kept
		// message": the silent skip the suite forbids.
		s, err := w.WALImpl.Read(ctx, opt)
		if err == nil || !errors.Is(err, walimpls.ErrPositionGone) {
			return w.wrapScanner(ctx, opt, s, err)
		}
		opt.DeliverPolicy = cursor.All()
	case "unbounded-read-ahead":
		opt.ReadAheadBytes = 1 << 30
	case "tail-starts-late", "tail-ignores-truncation":
		if n, ok := p.Tail(); ok && n >= 1 {
			opt.DeliverPolicy = w.brokenTail(ctx, n, p)
		}
	case "tail-from-latest":
		// Reads "the end" as "after the end".
		if n, ok := p.Tail(); ok && n >= 1 {
			opt.DeliverPolicy = cursor.Latest()
		}
	case "tail-accepts-zero":
		// Takes n < 1 as 1 instead of refusing it.
		if n, ok := p.Tail(); ok && n < 1 {
			opt.DeliverPolicy = cursor.Tail(1)
		}
	case "tail-not-tailing":
		// Delivers the tail stored at Read and ends, like a bounded read.
		if n, ok := p.Tail(); ok && n >= 1 {
			last, err := w.WALImpl.Last(ctx)
			if err != nil {
				return nil, err
			}
			inner, err := w.WALImpl.Read(ctx, opt)
			if err != nil {
				return nil, err
			}
			bs := newBrokenScanner(w, opt, nil)
			bs.stopAt = last
			bs.start(inner, nil)
			return bs, nil
		}
	case "future-clamps":
		// A start beyond the end is taken as "the end".
		if id, _, ok := p.StartID(); ok {
			if last, err := w.WALImpl.Last(ctx); err == nil && !last.IsZero() && last.LT(id) {
				opt.DeliverPolicy = cursor.Latest()
			}
		}
	}
	if w.broken == "lazy-latest" && p.IsLatest() {
		// The end is looked up by the scanner's goroutine, later: once the
		// log has grown past the end at Read, so that it misses an append
		// made right after Read however long that append takes.
		end, err := w.WALImpl.Last(ctx)
		if err != nil {
			return nil, err
		}
		bs := newBrokenScanner(w, opt, nil)
		go func() {
			for {
				last, err := w.WALImpl.Last(context.Background())
				if err != nil || !last.EQ(end) {
					break
				}
				select {
				case <-bs.stop:
					bs.startLate(nil, nil)
					return
				case <-time.After(time.Millisecond): // polls Last
				}
			}
			bs.startLate(w.WALImpl.Read(context.Background(), opt))
		}()
		return bs, nil
	}
	s, err := w.WALImpl.Read(ctx, opt)
	return w.wrapScanner(ctx, opt, s, err)
}

// brokenTail resolves cursor.Tail(n) from Last, as a backend that counts
// positions back from the end would, and gets it wrong on purpose:
//
//   - tail-ignores-truncation starts exactly n messages back from the
//     last, even below the first message kept (a gone position);
//   - tail-starts-late starts one message later than that when the log
//     holds more than n, so the tail misses its oldest message.
//
// Where the breakage does not apply it returns p unchanged.
func (w *brokenWAL) brokenTail(ctx context.Context, n int, p cursor.Policy) cursor.Policy {
	last, err := w.WALImpl.Last(ctx)
	if err != nil || last.IsZero() {
		return p
	}
	lastSeq, err := message.SeqOf(memory.Name, last)
	if err != nil {
		return p
	}
	start := max(0, lastSeq+1-int64(n)) // memory's first sequence is 0
	if w.broken == "tail-ignores-truncation" {
		return cursor.StartFrom(message.NewSeqID(memory.Name, start))
	}
	if start == 0 {
		return p // the log holds n messages or fewer
	}
	// The log holds more than n when the message before start is kept.
	probe, err := w.WALImpl.Read(ctx, walimpls.ReadOption{DeliverPolicy: cursor.StartFrom(message.NewSeqID(memory.Name, start-1))})
	if err != nil {
		return p
	}
	_ = probe.Close()
	return cursor.StartFrom(message.NewSeqID(memory.Name, start+1))
}

func (w *brokenWAL) wrapScanner(ctx context.Context, opt walimpls.ReadOption, s walimpls.Scanner, err error) (walimpls.Scanner, error) {
	if err != nil {
		return nil, err
	}
	var readCtx context.Context
	if w.broken == "scanner-bound-to-read-ctx" {
		readCtx = ctx
	}
	bs := newBrokenScanner(w, opt, readCtx)
	bs.start(s, nil)
	return bs, nil
}

// brokenScanner forwards an inner scanner, breaking it on purpose.
type brokenScanner struct {
	w       *brokenWAL
	opt     walimpls.ReadOption
	readCtx context.Context // scanner-bound-to-read-ctx: ends with it
	stopAt  message.ID      // tail-not-tailing: ends after delivering it

	mu    sync.Mutex
	inner walimpls.Scanner // nil until started
	err   error

	out  chan message.Immutable
	done chan struct{}
	stop chan struct{}
	once sync.Once
}

func newBrokenScanner(w *brokenWAL, opt walimpls.ReadOption, readCtx context.Context) *brokenScanner {
	return &brokenScanner{w: w, opt: opt, readCtx: readCtx, out: make(chan message.Immutable), done: make(chan struct{}), stop: make(chan struct{})}
}

func (s *brokenScanner) start(inner walimpls.Scanner, err error) {
	s.mu.Lock()
	s.inner, s.err = inner, err
	s.mu.Unlock()
	go s.run()
}

// startLate starts the scanner on inner, found after Read returned,
// unless Close came first: then it closes inner itself (Close closes only
// the inner scanner it finds).
func (s *brokenScanner) startLate(inner walimpls.Scanner, err error) {
	s.mu.Lock()
	select {
	case <-s.stop:
		if inner != nil {
			_ = inner.Close()
		}
		inner = nil
	default:
	}
	s.inner, s.err = inner, err
	s.mu.Unlock()
	go s.run()
}

func (s *brokenScanner) current() walimpls.Scanner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner
}

func (s *brokenScanner) run() {
	if s.w.broken != "chan-never-closes" {
		defer close(s.done)
		defer close(s.out)
	}
	inner := s.current()
	if inner == nil {
		return
	}
	var ctxDone <-chan struct{}
	if s.readCtx != nil {
		ctxDone = s.readCtx.Done()
	}
	n := 0
	for {
		var (
			m  message.Immutable
			ok bool
		)
		if s.w.broken == "polling-tail" {
			// Looks for messages on a timer of a second: a message that
			// arrives while it sleeps waits for the next look. It takes
			// the worst case, a full interval, so that the suite fails it
			// however the rounds line up with its timer.
			select {
			case m, ok = <-inner.Chan():
			default:
				select {
				case m, ok = <-inner.Chan():
					select {
					case <-time.After(time.Second):
					case <-s.stop:
						return
					}
				case <-s.stop:
					return
				}
			}
		} else {
			select {
			case m, ok = <-inner.Chan():
			case <-ctxDone:
				_ = inner.Close()
				return
			case <-s.stop:
				return
			}
		}
		if !ok {
			// Error is valid only once Done is closed: read earlier, it
			// may still be nil, and the breakage would not happen.
			<-inner.Done()
			if s.w.broken == "overtaken-skips" && errors.Is(inner.Error(), walimpls.ErrPositionGone) {
				// Carries on from the first message still kept.
				next, err := s.w.WALImpl.Read(context.Background(), walimpls.ReadOption{DeliverPolicy: cursor.All()})
				if err == nil {
					s.mu.Lock()
					s.inner = next
					s.mu.Unlock()
					inner = next
					continue
				}
			}
			return
		}
		n++
		if s.w.broken == "drop-every-10th" && n%10 == 0 {
			continue
		}
		if s.w.broken == "reverse-ids" {
			m = message.NewImmutable(m.Message, message.NewID(reversed{m.ID().Value()}))
		}
		if s.w.broken == "keeps-caller-buffers" {
			if kept, ok := s.w.o.names.kept.Load(m.ID().String()); ok {
				m = message.NewImmutable(kept.(message.Message), m.ID())
			}
		}
		select {
		case s.out <- m:
		case <-s.stop:
			return
		}
		if !s.stopAt.IsZero() && s.stopAt.LTE(m.ID()) {
			_ = inner.Close()
			return
		}
	}
}

func (s *brokenScanner) Chan() <-chan message.Immutable { return s.out }
func (s *brokenScanner) Done() <-chan struct{}          { return s.done }

func (s *brokenScanner) Error() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inner == nil {
		return s.err
	}
	return s.inner.Error()
}

func (s *brokenScanner) Close() error {
	switch s.w.broken {
	case "leak-scanner-goroutine":
		go func() { <-make(chan struct{}) }() // a goroutine nobody will stop
	case "scanner-close-hangs":
		<-make(chan struct{})
	}
	s.once.Do(func() { close(s.stop) })
	var err error
	if inner := s.current(); inner != nil {
		err = inner.Close()
	}
	if s.w.broken != "chan-never-closes" {
		<-s.done
	}
	return err
}

// reversed is an ID value whose order is the reverse of the one it wraps.
type reversed struct{ message.IDValue }

func (r reversed) Compare(o message.IDValue) int {
	if or, ok := o.(reversed); ok {
		return -r.IDValue.Compare(or.IDValue)
	}
	return 0
}

// TestOnlyParts: the suite runs the named parts alone, under Batches and
// Async too, each on a cluster of its own.
func TestOnlyParts(t *testing.T) {
	var made []string
	walimplstest.Run(t, func(t *testing.T) walimplstest.Cluster {
		made = append(made, t.Name())
		return brokenCluster{c: memory.NewCluster(), broken: "none", names: &brokenNames{
			maxTerm: map[string]int64{}, deleted: map[string]bool{}}}
	}, walimplstest.Implements(declared("none")...), walimplstest.OnlyParts("Lifecycle", "Last", "AsyncPipeline"))
	require.Equal(t, []string{
		"TestOnlyParts/Lifecycle", "TestOnlyParts/Last",
		"TestOnlyParts/Async/Lifecycle", "TestOnlyParts/Async/AsyncPipeline",
	}, made)
}
