// Package mock_walmanager holds mockery-generated mocks of the walmanager's
// dependencies (its WALOpener), for unit tests of the manager. Regenerate
// them with `make mocks`; never edit the generated files.
package mock_walmanager

import "github.com/streamwal/streamwal/walmanager"

// The mocks must keep satisfying the interfaces they stand in for.
var _ walmanager.WALOpener = (*MockWALOpener)(nil)
