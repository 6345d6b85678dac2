package pulsar

import (
	"context"

	"github.com/cockroachdb/errors"
)

// Delete implements walimpls.Opener. Not yet: the next commits implement it.
func (o *Opener) Delete(ctx context.Context, name string) error {
	return errors.Newf("pulsar: delete %q: not implemented yet", name)
}
