package pulsar

import (
	"testing"

	"github.com/streamwal/streamwal/adaptor/adaptortest"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// conformanceFactory starts one pulsartest broker per cluster; every
// NewOpener is another node with its own clients, built through the
// registry path. It takes topics over and deletes them through the
// broker's hooks (testConfig).
func conformanceFactory(t *testing.T) walimplstest.Cluster {
	_, cfg := startBroker(t, pulsartest.Config{})
	return built(cfg)
}

func built(cfg Config) walimplstest.Cluster {
	return walimplstest.BuiltCluster[Config]{Builder: NewBuilder(), Config: cfg, Logger: testLogger()}
}

// adminFactory does the same through the broker's admin API, over HTTP,
// as a YAML configuration with adminUrl does.
func adminFactory(t *testing.T) walimplstest.Cluster {
	b := pulsartest.Start(t, pulsartest.Config{ServeAdmin: true, AdminToken: "conformance"})
	cfg := adminConfig(b)
	cfg.AuthToken = "conformance"
	return built(cfg)
}

// The conformance runs are not parallel: the suite's goroutine-leak check
// looks at the whole process, so it must not see other tests' clients.

// implementsOptional declares Pulsar's optional interfaces to the suite,
// which checks the declaration against the types. No BatchRead: the
// backend offers no batch scanner (see the package documentation).
var implementsOptional = walimplstest.Implements(walimplstest.AsyncAppend, walimplstest.Create)

func TestConformance(t *testing.T) {
	walimplstest.Run(t, conformanceFactory, implementsOptional)
}

// With an admin URL the backend takes a topic over (unload) and deletes it
// through the admin API: the parts that do either run again. (Appends and
// reads are the binary protocol's, as without it.)
func TestConformanceOverAdminAPI(t *testing.T) {
	walimplstest.Run(t, adminFactory, implementsOptional, walimplstest.OpeningParts())
}

func TestAdaptor(t *testing.T) {
	adaptortest.Run(t, conformanceFactory)
}
