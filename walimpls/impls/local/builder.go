package local

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Builder builds local Stores from configuration: register it on a
// walimpls.Registry under the name "local".
type Builder struct{}

var _ walimpls.Builder = Builder{}

// NewBuilder returns the local backend's builder.
func NewBuilder() Builder { return Builder{} }

// Name implements walimpls.Builder.
func (Builder) Name() string { return Name }

// Build implements walimpls.Builder: it decodes the configuration into a
// Config, validates it and opens the Store, which is the returned Opener.
// Closing that Opener closes the store.
func (Builder) Build(ctx context.Context, p walimpls.BuildParams) (walimpls.Opener, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Wrap(err, "local: build")
	}
	var cfg Config
	if p.Config != nil {
		if err := p.Config(&cfg); err != nil {
			return nil, errors.WithStack(fmt.Errorf("local: decode config: %w: %w", err, walimpls.ErrInvalidConfig))
		}
	}
	s, err := New(ctx, cfg, p.Options()...)
	if err != nil {
		return nil, err
	}
	return s, nil
}
