// Package examples holds runnable examples of streamwal as an embedding
// program uses it. The package has no API of its own: read the examples in
// its _test.go files (or the Examples section of its documentation) and run
// them with go test ./examples.
//
//   - Example_localBackend: a configuration string through walconfig to
//     the embedded local backend, a WAL opened on it, appends read back.
//   - Example_leaderAndFollower: a read-only WAL following the writer. The
//     writer's own scanners see an acknowledged append at once; every other
//     reader sees it at the next watermark (Sync, or at most
//     adaptor.Options.TimeTickInterval later).
//   - Example_resumeAfterRestart: a consumer saves a checkpoint, the process
//     restarts, and reading resumes right after the checkpoint.
//   - Example_twoNodes: two nodes on one local store; opening a higher term
//     fences the earlier owner, whose appends then fail with
//     walimpls.ErrFenced.
//   - TestPublisher (publisher_test.go): a unit test of user code that takes
//     an adaptor.WAL, run against the generated mock of mocks/adaptor.
//   - TestOrderService (orders_test.go): a unit test of user code that takes
//     a walmanager.WALManager, run against the generated mock of
//     mocks/walmanager (handing out a mocked WAL).
//
// Every example keeps its data in a temporary directory it removes, waits
// for what it prints with Sync or by reading up to a known message (never
// with a sleep), and stops every goroutine it starts: TestMain checks for
// leaks.
package examples
