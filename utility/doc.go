// Package utility groups small, self-contained building blocks of streamwal's
// upper layers, one sub-package per job: reorder (a byte-bounded buffer that
// releases items in timetick order), backoff (capped exponential retry waits)
// and hlc (a hybrid logical clock for timeticks). Each is pure logic or a thin
// wrapper around time, testable step by step.
package utility
