package kafka

import (
	"testing"

	"github.com/streamwal/streamwal/adaptor/adaptortest"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// conformanceFactory starts one in-process kfake broker per cluster; every
// NewOpener is another node with its own franz-go clients, built through
// the registry path.
func conformanceFactory(mod func(*Config)) walimplstest.Factory {
	return func(t *testing.T) walimplstest.Cluster {
		c := newCluster(t)
		cfg := testConfig(c)
		if mod != nil {
			mod(&cfg)
		}
		return walimplstest.BuiltCluster[Config]{Builder: NewBuilder(), Config: cfg, Logger: testLogger()}
	}
}

// The conformance runs are not parallel: the suite's goroutine-leak check
// looks at the whole process, so it must not see other tests' clusters.

// implementsOptional declares Kafka's optional interfaces to the suite,
// which checks the declaration against the types.
var implementsOptional = walimplstest.Implements(walimplstest.BatchRead, walimplstest.AsyncAppend, walimplstest.Create)

func TestConformance(t *testing.T) {
	walimplstest.Run(t, conformanceFactory(nil), implementsOptional)
}

func TestConformanceNoTransactions(t *testing.T) {
	walimplstest.Run(t, conformanceFactory(func(c *Config) { c.DisableTransactions = true }), implementsOptional)
}

func TestAdaptor(t *testing.T) {
	adaptortest.Run(t, conformanceFactory(nil))
}

// Without transactions Kafka cannot fence: the adaptor's log-level fence and
// its confirmed acknowledgements carry the takeover parts.
func TestAdaptorNoTransactions(t *testing.T) {
	adaptortest.Run(t, conformanceFactory(func(c *Config) { c.DisableTransactions = true }))
}
