package pulsar

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor/adaptortest"
	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// brokerCluster is one pulsartest broker; every NewOpener is another node
// with its own clients, built through the registry path (NewBuilder and a
// config decoder).
type brokerCluster struct {
	cfg Config
}

func (c brokerCluster) NewOpener(t *testing.T) walimpls.Opener {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := c.cfg
	o, err := NewBuilder().Build(ctx, walimpls.BuildParams{
		Config: func(into any) error {
			*(into.(*Config)) = cfg
			return nil
		},
		Logger: testLogger(),
	})
	require.NoError(t, err)
	return o
}

// conformanceFactory takes topics over and deletes them through the
// broker's hooks (testConfig).
func conformanceFactory(t *testing.T) walimplstest.Cluster {
	_, cfg := startBroker(t, pulsartest.Config{})
	return brokerCluster{cfg: cfg}
}

// adminFactory does the same through the broker's admin API, over HTTP,
// as a YAML configuration with adminUrl does.
func adminFactory(t *testing.T) walimplstest.Cluster {
	b := pulsartest.Start(t, pulsartest.Config{ServeAdmin: true, AdminToken: "conformance"})
	cfg := adminConfig(b)
	cfg.AuthToken = "conformance"
	return brokerCluster{cfg: cfg}
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

func TestConformanceOverAdminAPI(t *testing.T) {
	walimplstest.Run(t, adminFactory, implementsOptional)
}

func TestAdaptor(t *testing.T) {
	adaptortest.Run(t, conformanceFactory)
}
