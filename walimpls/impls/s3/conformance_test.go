package s3

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor/adaptortest"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(ChildEnv); spec != "" {
		os.Exit(runChild(spec)) // a process test's child (child_test.go)
	}
	goleak.VerifyTestMain(m)
}

// factory makes each cluster a fresh prefix of one store: each NewOpener
// is another node on it, built through the Builder.
func factory(st *testStore, mod func(*Config)) walimplstest.Factory {
	return func(t *testing.T) walimplstest.Cluster {
		cfg := st.config(nil)
		if mod != nil {
			mod(&cfg)
		}
		return walimplstest.BuiltCluster[Config]{Builder: NewBuilder(), Config: cfg, Logger: testLogger()}
	}
}

var implementsOptional = walimplstest.Implements(walimplstest.BatchRead, walimplstest.AsyncAppend)

func TestConformance(t *testing.T) {
	walimplstest.Run(t, factory(newTestStore(t), nil), implementsOptional)
}

func TestAdaptor(t *testing.T) {
	adaptortest.Run(t, factory(newTestStore(t), nil))
}

func TestAdaptorUnfenced(t *testing.T) {
	adaptortest.Run(t, factory(newTestStore(t), func(c *Config) { c.Unfenced = true }))
}
