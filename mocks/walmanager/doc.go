// Package mock_walmanager holds mockery-generated mocks of the walmanager:
// MockWALManager stands in for a *walmanager.Manager in unit tests of code
// that takes a walmanager.WALManager, and MockWALOpener for the manager's
// backend in unit tests of the manager. Regenerate them with `make mocks`;
// never edit the generated files.
//
// Build every mock with its constructor and the test's t
// (NewMockWALManager(t)): a call the test set no expectation for then fails
// the test at once with the call named, and an expected call that never
// came fails it at cleanup. A mock built as a zero value panics instead.
// A manager built over a mocked opener calls, besides the opener's Open,
// the Available, Err (when Available closes) and Close of the WALs it
// returns; expect them (Maybe, where a test does not care).
package mock_walmanager

import "github.com/streamwal/streamwal/walmanager"

// The mocks must keep satisfying the interfaces they stand in for.
var (
	_ walmanager.WALOpener  = (*MockWALOpener)(nil)
	_ walmanager.WALManager = (*MockWALManager)(nil)
)
