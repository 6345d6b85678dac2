package walimplstest_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// brokenEnv selects the deliberately broken backend the child run uses.
const brokenEnv = "WALIMPLSTEST_BROKEN"

// TestSuiteCatchesBrokenBackends runs the suite, in a child process, against
// memory backends broken on purpose, and checks that it fails them in the
// parts that should notice; and that the unbroken wrapper passes, so the
// failures come from the breakage.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite several times in child processes")
	}
	cases := []struct {
		broken   string
		mustFail []string // parts that must fail
	}{
		{"none", nil},
		{"drop-every-10th", []string{"ConcurrentAppendRead", "DeliverPolicies"}},
		{"reverse-ids", []string{"ConcurrentAppendRead", "IDOrder"}},
		{"skip-truncated", []string{"Truncate"}},
		{"no-fencing-declared-fencing", []string{"Fencing"}},
		{"ignore-context", []string{"Context"}},
		{"leak-scanner-goroutine", []string{"ScannerContract"}},
	}
	for _, c := range cases {
		t.Run(c.broken, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenBackendChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.broken)
			out, err := cmd.CombinedOutput()
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
		return brokenCluster{c: memory.NewCluster(), broken: broken}
	}, walimplstest.WithWaitTimeout(2*time.Second))
}

type brokenCluster struct {
	c      *memory.Cluster
	broken string
}

func (b brokenCluster) NewOpener(t *testing.T) walimpls.Opener {
	o, err := memory.NewOpener(b.c, memory.Config{})
	require.NoError(t, err)
	return &brokenOpener{Opener: o, cluster: b.c, broken: b.broken}
}

type brokenOpener struct {
	*memory.Opener
	cluster *memory.Cluster
	broken  string
}

func (o *brokenOpener) Capabilities() walimpls.Capabilities {
	caps := o.Opener.Capabilities()
	if o.broken == "no-fencing-declared-fencing" {
		caps.Fencing = true // a lie: the cluster's fencing is off
	}
	return caps
}

func (o *brokenOpener) Open(ctx context.Context, ch walimpls.Channel) (walimpls.WALImpl, error) {
	if o.broken == "no-fencing-declared-fencing" {
		o.cluster.SetFencing(false)
	}
	w, err := o.Opener.Open(ctx, ch)
	if err != nil {
		return nil, err
	}
	return &brokenWAL{WALImpl: w, broken: o.broken}, nil
}

func (o *brokenOpener) UnmarshalID(s string) (message.ID, error) {
	id, err := o.Opener.UnmarshalID(s)
	if err != nil || o.broken != "reverse-ids" {
		return id, err
	}
	return message.NewID(reversed{id.Value()}), nil
}

type brokenWAL struct {
	walimpls.WALImpl
	broken string
}

func (w *brokenWAL) Append(ctx context.Context, m message.Message) (message.ID, error) {
	if w.broken == "ignore-context" {
		ctx = context.Background()
	}
	id, err := w.WALImpl.Append(ctx, m)
	if err == nil && w.broken == "reverse-ids" {
		id = message.NewID(reversed{id.Value()})
	}
	return id, err
}

func (w *brokenWAL) Read(ctx context.Context, opt walimpls.ReadOption) (walimpls.Scanner, error) {
	if w.broken == "reverse-ids" {
		if id, incl, ok := opt.DeliverPolicy.StartID(); ok {
			if r, isRev := id.Value().(reversed); isRev {
				id = message.NewID(r.IDValue)
			}
			if incl {
				opt.DeliverPolicy = walimpls.DeliverStartFrom(id)
			} else {
				opt.DeliverPolicy = walimpls.DeliverStartAfter(id)
			}
		}
	}
	if w.broken == "skip-truncated" {
		// Turn a truncated start position into "start at the first kept
		// message": the silent skip the suite forbids.
		s, err := w.WALImpl.Read(ctx, opt)
		if err == nil || !isGone(err) {
			return w.wrapScanner(s, err)
		}
		opt.DeliverPolicy = walimpls.DeliverAll()
	}
	return w.wrapScanner(w.WALImpl.Read(ctx, opt))
}

func (w *brokenWAL) wrapScanner(s walimpls.Scanner, err error) (walimpls.Scanner, error) {
	if err != nil {
		return nil, err
	}
	bs := &brokenScanner{inner: s, broken: w.broken, out: make(chan message.Immutable), done: make(chan struct{}), stop: make(chan struct{})}
	go bs.run()
	return bs, nil
}

// brokenScanner forwards an inner scanner, breaking it on purpose.
type brokenScanner struct {
	inner  walimpls.Scanner
	broken string
	out    chan message.Immutable
	done   chan struct{}
	stop   chan struct{}
}

func (s *brokenScanner) run() {
	defer close(s.done)
	defer close(s.out)
	n := 0
	for m := range s.inner.Chan() {
		n++
		if s.broken == "drop-every-10th" && n%10 == 0 {
			continue
		}
		if s.broken == "reverse-ids" {
			m = message.NewImmutable(m.Message, message.NewID(reversed{m.ID().Value()}))
		}
		select {
		case s.out <- m:
		case <-s.stop:
			return
		}
	}
}

func (s *brokenScanner) Chan() <-chan message.Immutable { return s.out }
func (s *brokenScanner) Done() <-chan struct{}          { return s.done }
func (s *brokenScanner) Error() error                   { return s.inner.Error() }

func (s *brokenScanner) Close() error {
	if s.broken == "leak-scanner-goroutine" {
		go func() { <-make(chan struct{}) }() // a goroutine nobody will stop
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	err := s.inner.Close()
	<-s.done
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

func isGone(err error) bool { return errors.Is(err, walimpls.ErrPositionGone) }
