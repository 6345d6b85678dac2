// Package s3conformance runs the conformance suite on the s3 backend in
// the configurations and on the stores that walimpls/impls/s3's own tests
// do not: the whole suite on versitygw (a real S3 server in its own
// process), and on gofakes3 the parts a size limit and running unfenced
// change. It is a package of its own so that go test runs it beside the
// backend's package instead of after it (a whole suite takes a minute
// under the race detector, and the suite's goroutine checks forbid
// running two in one process at once).
package s3conformance

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var implementsOptional = walimplstest.Implements(walimplstest.BatchRead, walimplstest.AsyncAppend)

// factory is a fresh prefix of one store per cluster, each NewOpener
// another node on it with the backend's own client.
func factory(store *s3test.Store, mod func(*s3.Config)) walimplstest.Factory {
	var n atomic.Int64
	return func(t *testing.T) walimplstest.Cluster {
		cfg := store.Config(fmt.Sprintf("conformance-%d/", n.Add(1)))
		cfg.FlushInterval = 2 * time.Millisecond
		if mod != nil {
			mod(&cfg)
		}
		return cluster{cfg: cfg}
	}
}

type cluster struct{ cfg s3.Config }

func (c cluster) NewOpener(t *testing.T) walimpls.Opener {
	o, err := s3.New(t.Context(), c.cfg)
	require.NoError(t, err)
	return o
}

// The whole conformance suite against a real S3 server in its own process:
// versitygw on a temporary directory, over loopback.
func TestConformanceOnVersitygw(t *testing.T) {
	walimplstest.Run(t, factory(s3test.Versity(t), nil), implementsOptional)
}

// A size limit changes the suite's large-message and too-large paths: the
// parts that send messages at or above the limit run again under it. (The
// rest write as they do at the default limit, which the whole suite checks
// on both stores.)
func TestConformanceWithSizeLimit(t *testing.T) {
	walimplstest.Run(t, factory(s3test.FakeH2C(t), func(c *s3.Config) { c.MaxMessageBytes = 64 << 10 }), implementsOptional,
		walimplstest.SizeLimitParts())
}

// Unfenced, the backend declares no fencing and opens without the term
// check: the parts about opening, fencing and taking over run again and
// skip what it declares it cannot do. (Its writer, readers and deletes are
// the fenced backend's.)
func TestConformanceUnfenced(t *testing.T) {
	walimplstest.Run(t, factory(s3test.FakeH2C(t), func(c *s3.Config) { c.Unfenced = true }), implementsOptional,
		walimplstest.OpeningParts())
}
