// Package mock_walimpls holds mockery-generated mocks of the walimpls backend
// contract, for unit tests of the layers above a backend. Regenerate them with
// `make mocks`; never edit the generated files.
package mock_walimpls

import "github.com/streamwal/streamwal/walimpls"

// The mocks must keep satisfying the contract they stand in for.
var (
	_ walimpls.Builder      = (*MockBuilder)(nil)
	_ walimpls.Opener       = (*MockOpener)(nil)
	_ walimpls.WALImpl      = (*MockWALImpl)(nil)
	_ walimpls.Scanner      = (*MockScanner)(nil)
	_ walimpls.BatchReader  = (*MockBatchReader)(nil)
	_ walimpls.BatchScanner = (*MockBatchScanner)(nil)
)
