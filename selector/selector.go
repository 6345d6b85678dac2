// Package selector turns configuration into a backend: it reads the YAML
// configuration, picks the backend (an explicit choice wins; otherwise the
// embedded "local" backend), and builds its Opener from the compiled-in
// backends, registered by explicit calls on a registry value.
//
// Configuration:
//
//	backend: local        # local (default) | memory | kafka | pulsar
//	local:                # the section of the chosen backend is decoded
//	  dir: ./streamwal-data
//	  sync: always
//	kafka:
//	  seedBrokers: [127.0.0.1:9092]
//
//	meta:                 # where the control data lives (see MetaConfig)
//	  store: bolt
//	pool:                 # the channel pool (see PoolConfig)
//	  size: 16
//
// Sections of backends that are not chosen are ignored; an unknown backend
// name is an error listing the registered ones; an unknown key in the chosen
// section, or in the meta and pool sections, is an error, not a silent
// default.
package selector

import (
	"bytes"
	"context"
	"log/slog"
	"os"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
)

// DefaultBackend is the backend used when the configuration names none.
const DefaultBackend = local.Name

// DefaultLocalDir is where the local backend keeps its log when the
// configuration does not say.
const DefaultLocalDir = "./streamwal-data"

// Config is the parsed configuration file.
type Config struct {
	// Backend names the backend; empty selects DefaultBackend.
	Backend string `yaml:"backend"`
	// sections holds every backend's section, decoded on demand.
	sections map[string]yaml.Node
}

// Parse reads a YAML configuration. Empty input is a valid configuration
// that selects every default.
func Parse(data []byte) (Config, error) {
	var raw map[string]yaml.Node
	if len(bytes.TrimSpace(data)) > 0 {
		if err := yaml.Unmarshal(data, &raw); err != nil {
			return Config{}, errors.Wrapf(walimpls.ErrInvalidConfig, "selector: parse: %v", err)
		}
	}
	cfg := Config{sections: map[string]yaml.Node{}}
	for k, v := range raw {
		if k == "backend" {
			if err := v.Decode(&cfg.Backend); err != nil {
				return Config{}, errors.Wrapf(walimpls.ErrInvalidConfig, "selector: backend: %v", err)
			}
			continue
		}
		cfg.sections[k] = v
	}
	return cfg, nil
}

// Load reads and parses a configuration file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, errors.Wrapf(err, "selector: read %s", path)
	}
	return Parse(data)
}

// Chosen returns the backend the configuration selects.
func (c Config) Chosen() string {
	if c.Backend == "" {
		return DefaultBackend
	}
	return c.Backend
}

// decoder decodes the chosen backend's section, strictly.
func (c Config) decoder(name string, defaults func(any)) walimpls.ConfigDecoder {
	return func(into any) error {
		if defaults != nil {
			defaults(into)
		}
		node, ok := c.sections[name]
		if !ok {
			return nil
		}
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		if err := enc.Encode(&node); err != nil {
			return err
		}
		dec := yaml.NewDecoder(&buf)
		dec.KnownFields(true)
		return dec.Decode(into)
	}
}

// Registry returns a registry holding every compiled-in backend. memCluster
// backs the "memory" backend (nil: a fresh one).
func Registry(memCluster *memory.Cluster) (*walimpls.Registry, error) {
	if memCluster == nil {
		memCluster = memory.NewCluster()
	}
	r := walimpls.NewRegistry()
	for _, b := range []walimpls.Builder{local.NewBuilder(), memory.NewBuilder(memCluster), kafka.NewBuilder(), pulsar.NewBuilder()} {
		if err := r.Register(b); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Deps are what the built backend needs besides its configuration.
type Deps struct {
	// Registry to look the backend up in; nil uses Registry(nil).
	Registry   *walimpls.Registry
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Build builds the Opener of the backend c selects.
func Build(ctx context.Context, c Config, d Deps) (walimpls.Opener, error) {
	reg := d.Registry
	if reg == nil {
		var err error
		if reg, err = Registry(nil); err != nil {
			return nil, err
		}
	}
	name := c.Chosen()
	b, err := reg.Lookup(name)
	if err != nil {
		return nil, errors.Wrap(err, "selector")
	}
	var defaults func(any)
	if name == local.Name {
		defaults = func(into any) {
			if lc, ok := into.(*local.Config); ok && lc.Dir == "" {
				lc.Dir = DefaultLocalDir
			}
		}
	}
	o, err := b.Build(ctx, walimpls.BuildParams{Config: c.decoder(name, defaults), Logger: d.Logger, Registerer: d.Registerer})
	if err != nil {
		return nil, errors.Wrapf(err, "selector: build %s", name)
	}
	return o, nil
}
