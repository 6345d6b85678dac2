package metatest

import (
	"testing"

	"github.com/streamwal/streamwal/meta"
)

// Factory makes the stores the suite runs against.
type Factory interface {
	// New returns a new, empty store: List("") finds nothing. The suite
	// closes it (Close must be idempotent); anything else New starts must be
	// stopped through t.Cleanup.
	New(t *testing.T) meta.Store
}

// Restarter is a Factory whose stores can be reopened over the same data:
// a file reopened, a new client on the same cluster and prefix. The
// Restart part runs only when the Factory implements it.
type Restarter interface {
	Factory
	// Restart closes s, a store this Factory made, and returns a new store
	// over its data. The suite does not use s again.
	Restart(t *testing.T, s meta.Store) meta.Store
}

// FactoryFunc adapts a function to a Factory that cannot restart.
type FactoryFunc func(t *testing.T) meta.Store

// New calls f.
func (f FactoryFunc) New(t *testing.T) meta.Store { return f(t) }

// Run runs every part of the suite, each as a named subtest on a new store
// from f. Parts do not run in parallel with each other.
func Run(t *testing.T, f Factory) {
	for _, p := range parts {
		t.Run(p.name, func(t *testing.T) {
			p.fn(newEnv(t, f))
		})
	}
}

// parts are the suite's parts, in the order they run.
var parts = []struct {
	name string
	fn   func(e *env)
}{
	{"Lifecycle", testLifecycle},
	{"CloseInFlight", testCloseInFlight},
	{"CRUD", testCRUD},
	{"Values", testValues},
	{"PutExpect", testPutExpect},
	{"DeleteExpect", testDeleteExpect},
	{"Revisions", testRevisions},
	{"ListPrefix", testListPrefix},
	{"ListRevision", testListRevision},
	{"ListSnapshot", testListSnapshot},
	{"Commit", testCommit},
	{"CommitConflict", testCommitConflict},
	{"ConcurrentCAS", testConcurrentCAS},
	{"ConcurrentCommit", testConcurrentCommit},
	{"Invalid", testInvalid},
	{"Context", testContext},
	{"Restart", testRestart},
}
