package walimpls

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
)

// NewBuilder returns the Builder of the backend name: its Build decodes
// the configuration section into a C (left at its zero value, the
// backend's defaults, when there is none) and hands it, with the
// BuildParams' logger and registerer as Options, to newOpener, the
// backend's constructor. A section that does not decode is an error
// matching ErrInvalidConfig.
func NewBuilder[C any, O Opener](name string, newOpener func(context.Context, C, ...Option) (O, error)) Builder {
	return builderFunc[C, O]{name: name, newOpener: newOpener}
}

type builderFunc[C any, O Opener] struct {
	name      string
	newOpener func(context.Context, C, ...Option) (O, error)
}

func (b builderFunc[C, O]) Name() string { return b.name }

func (b builderFunc[C, O]) Build(ctx context.Context, p BuildParams) (Opener, error) {
	var cfg C
	if p.Config != nil {
		if err := p.Config(&cfg); err != nil {
			return nil, errors.WithStack(fmt.Errorf("%s: decode config: %w: %w", b.name, err, ErrInvalidConfig))
		}
	}
	o, err := b.newOpener(ctx, cfg, p.Options()...)
	if err != nil {
		// Not o: a typed nil pointer in an Opener would not be nil.
		return nil, err
	}
	return o, nil
}
