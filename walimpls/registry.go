package walimpls

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
)

// Registry maps backend names to Builders. It is a value built by explicit
// Register calls: there is no global registry. Safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	builders map[string]Builder
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{builders: map[string]Builder{}} }

// Register adds a builder. A nil builder, an empty name or a name already
// registered is an error.
func (r *Registry) Register(b Builder) error {
	if b == nil {
		return errors.New("register: nil builder")
	}
	name := b.Name()
	if name == "" {
		return errors.New("register: builder with an empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.builders[name]; ok {
		return errors.Newf("register: backend %q is already registered", name)
	}
	r.builders[name] = b
	return nil
}

// Lookup returns the builder registered under name. An unknown name is an
// ErrUnknownBackend error that lists the registered names.
func (r *Registry) Lookup(name string) (Builder, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if b, ok := r.builders[name]; ok {
		return b, nil
	}
	return nil, errors.Wrapf(ErrUnknownBackend, "%q (registered: %s)", name, r.namesLocked())
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.builders))
}

// namesLocked assumes r.mu is held.
func (r *Registry) namesLocked() string {
	names := slices.Sorted(maps.Keys(r.builders))
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
