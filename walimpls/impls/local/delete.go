package local

import (
	"context"

	"github.com/cockroachdb/errors"
)

// Delete implements walimpls.Opener. Not yet: the next commits implement it.
func (o *Opener) Delete(ctx context.Context, name string) error {
	return errors.Newf("local: delete %q: not implemented yet", name)
}

// Delete implements walimpls.Opener. Not yet: the next commits implement it.
func (s *Store) Delete(ctx context.Context, name string) error {
	return errors.Newf("local: delete %q: not implemented yet", name)
}
