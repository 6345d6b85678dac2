package walimplstest

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

func errorsIsFenced(err error) bool { return errors.Is(err, walimpls.ErrFenced) }
