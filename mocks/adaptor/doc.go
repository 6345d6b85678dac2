// Package mock_adaptor holds mockery-generated mocks of the adaptor's WAL
// (its scanners are walimpls's: package mock_walimpls mocks them), for unit tests of the layers above the adaptor (walmanager).
// Regenerate them with `make mocks`; never edit the generated files.
package mock_adaptor

import "github.com/streamwal/streamwal/adaptor"

// The mocks must keep satisfying the interfaces they stand in for.
var _ adaptor.WAL = (*MockWAL)(nil)
