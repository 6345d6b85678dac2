package walimplstest_test

import "github.com/cockroachdb/errors"

func errorsIs(err, target error) bool { return errors.Is(err, target) }
