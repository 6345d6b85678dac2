package walimplstest

import (
	"testing"
	"time"

	"github.com/streamwal/streamwal/walimpls"
)

// Cluster is one fresh backend deployment for one part of the suite.
type Cluster interface {
	// NewOpener connects another node to this backend: Openers from one
	// Cluster see the same channels. The suite closes every Opener it gets;
	// Opener.Close must be idempotent.
	NewOpener(t *testing.T) walimpls.Opener
}

// Factory returns a fresh, empty Cluster. Whatever it starts must be stopped
// through t.Cleanup.
type Factory func(t *testing.T) Cluster

// Option tunes how the suite runs, or states what the backend declares;
// none weakens what a part checks.
type Option func(*options)

type options struct {
	waitTimeout time.Duration
	features    featureSet      // declared through Implements
	only        map[string]bool // OnlyParts; nil runs every part
}

// OnlyParts runs the named parts alone (under Batches and Async too, where
// they run there). It is for a second configuration of a backend whose
// default configuration runs the whole suite: a size limit runs the parts
// that send large messages, say, rather than the whole suite again. A
// backend that runs only some parts in every configuration does not pass
// the suite. Run fails on a name that is not a part.
func OnlyParts(names ...string) Option {
	return func(o *options) {
		if o.only == nil {
			o.only = map[string]bool{}
		}
		for _, n := range names {
			o.only[n] = true
		}
	}
}

// SizeLimitParts is OnlyParts of the parts a message size limit changes:
// those that send messages at or above it.
func SizeLimitParts() Option {
	return OnlyParts("DeclaredInterfaces", "Lifecycle", "SizeLimit", "CallerBuffers", "AppendBatch", "TruncateOvertakesScanner")
}

// OpeningParts is OnlyParts of the parts about opening, fencing, taking a
// channel over and deleting it: what a backend's fencing setting, or the
// API it takes channels over and deletes them through, changes.
func OpeningParts() Option {
	return OnlyParts("DeclaredInterfaces", "Lifecycle", "OpenerClose", "ReadOnly", "ReadOnlyCreatesNothing",
		"Fencing", "SameTermTakeover", "RefusedOpen", "Delete", "DeleteFencesOtherNodes")
}

// runs reports whether the part named name runs.
func (o *options) runs(name string) bool { return o.only == nil || o.only[name] }

// WithWaitTimeout sets the watchdog on every wait (default 30s): how long a
// message may take to arrive before the part fails.
func WithWaitTimeout(d time.Duration) Option {
	return func(o *options) { o.waitTimeout = d }
}

// Run runs every part of the conformance suite against the backend f makes.
// A backend states once, with Implements, which optional interfaces of
// walimpls it implements; the parts under Batches and Async run for what
// it declares, and DeclaredInterfaces fails when the declaration and its
// types disagree.
//
// Run takes goroutine snapshots (ScannerContract): do not run it in parallel
// with other tests of the same package.
func Run(t *testing.T, f Factory, opts ...Option) {
	o := options{waitTimeout: defaultWaitTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	for name := range o.only {
		if !isPart(name) {
			t.Fatalf("walimplstest.OnlyParts: %q is not a part of the suite", name)
		}
	}
	for _, p := range parts {
		if !o.runs(p.name) {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			p.fn(t, newEnv(t, f(t), o, plainVariant))
		})
	}
	t.Run("Batches", func(t *testing.T) {
		if !o.features.has(BatchRead) {
			t.Skip(undeclaredSkip(BatchRead, "Batches"))
		}
		for _, p := range parts {
			if !batchParts[p.name] || !o.runs(p.name) {
				continue
			}
			t.Run(p.name, func(t *testing.T) {
				p.fn(t, newEnv(t, f(t), o, batchesVariant))
			})
		}
	})
	t.Run("Async", func(t *testing.T) {
		if !o.features.has(AsyncAppend) {
			t.Skip(undeclaredSkip(AsyncAppend, "Async"))
		}
		for _, p := range parts {
			if !asyncParts[p.name] || !o.runs(p.name) {
				continue
			}
			t.Run(p.name, func(t *testing.T) {
				p.fn(t, newEnv(t, f(t), o, asyncVariant))
			})
		}
		if !o.runs("AsyncPipeline") {
			return
		}
		t.Run("AsyncPipeline", func(t *testing.T) {
			testAsyncPipeline(t, newEnv(t, f(t), o, asyncVariant))
		})
	})
}

// isPart reports whether name names a part (AsyncPipeline runs under
// Async alone).
func isPart(name string) bool {
	if name == "AsyncPipeline" {
		return true
	}
	for _, p := range parts {
		if p.name == name {
			return true
		}
	}
	return false
}

// parts are the suite's parts, in the order they run.
var parts = []struct {
	name string
	fn   func(t *testing.T, c *env)
}{
	{"DeclaredInterfaces", testDeclaredInterfaces},
	{"Lifecycle", testLifecycle},
	{"OpenerClose", testOpenerClose},
	{"ChannelNames", testChannelNames},
	{"SizeLimit", testSizeLimit},
	{"ConcurrentAppendRead", testConcurrentAppendRead},
	{"CallerBuffers", testCallerBuffers},
	{"AppendBatch", testAppendBatch},
	{"IDOrder", testIDOrder},
	{"CanonicalIDs", testCanonicalIDs},
	{"Last", testLast},
	{"DeliverPolicies", testDeliverPolicies},
	{"DeliverTail", testDeliverTail},
	{"LatestStartsAtRead", testLatestStartsAtRead},
	{"IdleTail", testIdleTail},
	{"Truncate", testTruncate},
	{"TruncateBoundaries", testTruncateBoundaries},
	{"TruncateOvertakesScanner", testTruncateOvertakesScanner},
	{"FuturePosition", testFuturePosition},
	{"ScannerContract", testScannerContract},
	{"ScannerOutlivesReadContext", testScannerOutlivesReadContext},
	{"ReadOnly", testReadOnly},
	{"ReadOnlyCreatesNothing", testReadOnlyCreatesNothing},
	{"Context", testContext},
	{"ParallelChannels", testParallelChannels},
	{"Fencing", testFencing},
	{"SameTermTakeover", testSameTermTakeover},
	{"RefusedOpen", testRefusedOpen},
	{"Delete", testDelete},
	{"DeleteFencesOtherNodes", testDeleteFencesOtherNodes},
}
