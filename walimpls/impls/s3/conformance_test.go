package s3

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/adaptor/adaptortest"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(ChildEnv); spec != "" {
		os.Exit(runChild(spec)) // a process test's child (child_test.go)
	}
	goleak.VerifyTestMain(m)
}

// cluster is a fresh prefix of one store: each NewOpener is another node
// on it, built through the Builder.
type cluster struct{ cfg Config }

func (c cluster) NewOpener(t *testing.T) walimpls.Opener {
	cfg := c.cfg
	o, err := NewBuilder().Build(t.Context(), walimpls.BuildParams{
		Config: func(into any) error {
			*(into.(*Config)) = cfg
			return nil
		},
		Logger: testLogger(),
	})
	if err != nil {
		t.Fatalf("new opener: %v", err)
	}
	return o
}

func factory(st *testStore, mod func(*Config)) walimplstest.Factory {
	return func(t *testing.T) walimplstest.Cluster {
		cfg := st.config(nil)
		if mod != nil {
			mod(&cfg)
		}
		return cluster{cfg: cfg}
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
