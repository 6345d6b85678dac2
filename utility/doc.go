// Package utility groups small, self-contained building blocks of streamwal's
// upper layers and backends, one sub-package per job: reorder (a
// byte-bounded buffer that releases items in timetick order), backoff
// (capped exponential retry waits), hlc (a hybrid logical clock for
// timeticks), lifecycle (the stop, done and error contract of a scanner's
// goroutine, and the set of a WAL's live scanners) and serial (functions
// run in post order on one goroutine, for work a writer's loop hands
// off). Each is pure logic or a thin wrapper around time or a goroutine,
// testable step by step.
package utility
