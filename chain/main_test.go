package chain_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/internal/etcdtest"
)

// srv is the package's etcd server; tests use their own key prefixes.
var srv *etcdtest.Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = etcdtest.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(etcdtest.Main(m, srv))
}
