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
// Parse and Load check the whole file, strictly: an unknown key at the top
// level or at any level of any section (also a backend's that is not
// chosen), a key given twice, and a value of the wrong type are errors, not
// silent defaults. Each error names the file (for Load), the line of the
// offending key or value, and its key path, and suggests the known key a
// near miss was meant to be:
//
//	selector: node.yaml:1: bakend: unknown key (did you mean "backend"?)
//	selector: node.yaml:4: local.segmentByte: unknown key (did you mean "segmentBytes"?)
//	selector: node.yaml:4: local.segmentBytes: want an integer, got "big"
//
// Every such error is a *ConfigError and matches walimpls.ErrInvalidConfig;
// a file with several problems reports them all, one per line. Values a
// backend, the meta store or the pool refuses when it is built (a sync
// policy it does not know, a size out of range) are reported the same way,
// at the line of the key the refusal names. An unknown backend name is an
// ErrUnknownBackend error listing the registered ones.
//
// Sections of backends that are not chosen are checked but not used. The
// sections a file may hold are those of the backends compiled in (see
// Registry), besides backend, meta and pool.
package selector

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"

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
	// file is the name of the file the configuration was loaded from.
	file string
	// backendNode is the "backend" value, for the line of its errors.
	backendNode *yaml.Node
	// sections holds every section, checked by Parse, decoded on demand;
	// its nodes keep the lines of the original text.
	sections map[string]*yaml.Node
}

// Parse reads a YAML configuration and checks it, strictly (see the package
// documentation). Empty input is a valid configuration that selects every
// default. Its errors are *ConfigError values (joined when there are
// several) and match walimpls.ErrInvalidConfig.
func Parse(data []byte) (Config, error) { return parse("", data) }

// Load reads, parses and checks a configuration file, like Parse; its
// errors name the file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, errors.Wrapf(err, "selector: read %s", path)
	}
	return parse(path, data)
}

func parse(file string, data []byte) (Config, error) {
	cfg := Config{file: file, sections: map[string]*yaml.Node{}}
	if len(bytes.TrimSpace(data)) == 0 {
		return cfg, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Config{}, syntaxError(file, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root = resolve(root); root == nil || root.Kind == 0 || root.Kind == yaml.DocumentNode || isNull(root) {
		return cfg, nil // comments only, or null
	}
	ch := checker{file: file}
	ch.check(root, reflect.TypeFor[fileShape](), "")
	if err := ch.err(); err != nil {
		return Config{}, err
	}
	// Checked: this decode resolves merge keys and aliases only.
	var raw map[string]yaml.Node
	if err := root.Decode(&raw); err != nil {
		return Config{}, &ConfigError{File: file, Line: root.Line, Msg: yamlMessage(err), Err: err}
	}
	for k, v := range raw {
		if k == "backend" {
			if err := v.Decode(&cfg.Backend); err != nil {
				return Config{}, &ConfigError{File: file, Line: v.Line, Path: k, Msg: yamlMessage(err), Err: err}
			}
			cfg.backendNode = &v
			continue
		}
		cfg.sections[k] = &v
	}
	return cfg, nil
}

// Chosen returns the backend the configuration selects.
func (c Config) Chosen() string {
	if c.Backend == "" {
		return DefaultBackend
	}
	return c.Backend
}

// decoder decodes the section name, strictly, straight from its node, so
// that errors keep the file's lines.
func (c Config) decoder(name string, defaults func(any)) walimpls.ConfigDecoder {
	return func(into any) error {
		if defaults != nil {
			defaults(into)
		}
		node, ok := c.sections[name]
		if !ok {
			return nil
		}
		ch := checker{file: c.file}
		ch.check(node, reflect.TypeOf(into), name)
		if err := ch.err(); err != nil {
			return err
		}
		if err := node.Decode(into); err != nil {
			return &ConfigError{File: c.file, Line: node.Line, Path: name, Msg: yamlMessage(err), Err: err}
		}
		return nil
	}
}

// refused turns an error a layer returned for the section name's values
// into a ConfigError at the line of the key it names (the section's line
// when it names none of the keys present), keeping err as the cause.
func (c Config) refused(name string, err error) error {
	node := c.sections[name]
	line, path := 0, name
	if node != nil {
		line = node.Line
		if k := namedKey(resolve(node), err.Error()); k != nil {
			line, path = k.Line, name+"."+k.Value
		}
	}
	return &ConfigError{File: c.file, Line: line, Path: path, Msg: err.Error(), Err: err}
}

// namedKey returns the key of mapping n whose name occurs first in msg as a
// whole word outside double quotes (where messages quote values), or nil.
func namedKey(n *yaml.Node, msg string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	quoted := make([]bool, len(msg))
	for i, in := 0, false; i < len(msg); i++ {
		switch {
		case msg[i] == '\\' && in:
			quoted[i] = true
			if i+1 < len(msg) {
				i++
				quoted[i] = true
			}
			continue
		case msg[i] == '"':
			in = !in
		}
		quoted[i] = in
	}
	var best *yaml.Node
	bestAt := len(msg)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			continue
		}
		for off := 0; ; {
			at := strings.Index(msg[off:], k.Value)
			if at < 0 {
				break
			}
			at += off
			end := at + len(k.Value)
			if !quoted[at] && !isWordByte(msg, at-1) && !isWordByte(msg, end) {
				if at < bestAt {
					best, bestAt = k, at
				}
				break
			}
			off = at + 1
		}
	}
	return best
}

func isWordByte(s string, i int) bool {
	if i < 0 || i >= len(s) {
		return false
	}
	b := s[i]
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// line is the line of n, or 0.
func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
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

// Backend is the Opener Build made, with the backend's own type beside it:
// what only one backend has (local's recovery report and further openers
// on one store, the memory cluster's fault knobs) is reachable without a
// type assertion. Backend is itself a walimpls.Opener. For a compiled-in
// backend the field of its name is set; for a backend of the caller's own
// Registry none is.
type Backend struct {
	walimpls.Opener
	// Name is the backend's name in configuration.
	Name string

	Local  *local.Store
	Memory *memory.Opener
	Kafka  *kafka.Opener
	Pulsar *pulsar.Opener
}

func newBackend(name string, o walimpls.Opener) *Backend {
	b := &Backend{Opener: o, Name: name}
	switch o := o.(type) {
	case *local.Store:
		b.Local = o
	case *memory.Opener:
		b.Memory = o
	case *kafka.Opener:
		b.Kafka = o
	case *pulsar.Opener:
		b.Pulsar = o
	}
	return b
}

// Build builds the Opener of the backend c selects.
func Build(ctx context.Context, c Config, d Deps) (*Backend, error) {
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
		return nil, c.unknownBackend(name, reg)
	}
	var defaults func(any)
	if name == local.Name {
		defaults = func(into any) {
			if lc, ok := into.(*local.Config); ok && lc.Dir == "" {
				lc.Dir = DefaultLocalDir
			}
		}
	}
	// decodeErr keeps the decoder's own error, which the builder flattens
	// into its text.
	var decodeErr error
	decode := c.decoder(name, defaults)
	o, err := b.Build(ctx, walimpls.BuildParams{Config: func(into any) error {
		decodeErr = decode(into)
		return decodeErr
	}, Logger: d.Logger, Registerer: d.Registerer})
	if err != nil {
		if decodeErr != nil {
			return nil, decodeErr
		}
		if errors.Is(err, walimpls.ErrInvalidConfig) {
			return nil, c.refused(name, err)
		}
		return nil, errors.Wrapf(err, "selector: build %s", name)
	}
	return newBackend(name, o), nil
}

// unknownBackend is the error for a backend name reg does not hold: at the
// line of the backend key, with a near miss and the registered names.
func (c Config) unknownBackend(name string, reg *walimpls.Registry) error {
	where := "selector"
	switch l := line(c.backendNode); {
	case c.file != "" && l > 0:
		where = fmt.Sprintf("selector: %s:%d", c.file, l)
	case l > 0:
		where = fmt.Sprintf("selector: line %d", l)
	}
	hint := ""
	if s := suggest(name, reg.Names()); strings.HasPrefix(s, " (did you mean") {
		hint = ": " + strings.TrimSuffix(strings.TrimPrefix(s, " ("), ")")
	}
	names := strings.Join(reg.Names(), ", ")
	if names == "" {
		names = "none"
	}
	return errors.Wrapf(walimpls.ErrUnknownBackend, "%s: backend %q%s (registered: %s)", where, name, hint, names)
}
