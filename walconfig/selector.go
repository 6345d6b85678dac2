package walconfig

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/streamwal/streamwal/internal/configerr"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// DefaultBackend is the backend used when the configuration names none.
const DefaultBackend = local.Name

// DefaultLocalDir is where the local backend keeps its log when the
// configuration does not say.
const DefaultLocalDir = "./streamwal-data"

// Config is the parsed configuration file.
type Config struct {
	// Backend is the top-level "backend" value: the backend of a file
	// without backends (empty selects DefaultBackend), or, beside backends,
	// the default entry's name. Default says which entry is the default.
	Backend string `yaml:"backend"`
	// file is the name of the file the configuration was loaded from.
	file string
	// backendNode is the "backend" value, for the line of its errors.
	backendNode *yaml.Node
	// sections holds every top-level section, checked by Parse, decoded on
	// demand; its nodes keep the lines of the original text.
	sections map[string]*yaml.Node
	// entries are the entries of "backends", by name; nil for a file
	// without backends, whose one entry is the chosen backend's section.
	entries map[string]entry
	// def is the default entry's name when entries is set.
	def string
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
	// This decode resolves merge keys and aliases only; it fails only on
	// what the check reported (a key given twice), or on a file that is
	// not a mapping.
	var raw map[string]yaml.Node
	if err := root.Decode(&raw); err != nil {
		if err := ch.err(); err != nil {
			return Config{}, err
		}
		return Config{}, &ConfigError{File: file, Line: root.Line, Msg: yamlMessage(err), Err: err}
	}
	var backends, def *yaml.Node
	for k, v := range raw {
		switch k {
		case "backend":
			cfg.backendNode = &v
			if err := v.Decode(&cfg.Backend); err != nil && len(ch.errs) == 0 {
				ch.errs = append(ch.errs, &ConfigError{File: file, Line: v.Line, Path: k, Msg: yamlMessage(err), Err: err})
			}
		case "backends":
			backends = &v
		case "default":
			def = &v
		default:
			cfg.sections[k] = &v
		}
	}
	cfg.parseEntries(&ch, root, backends, def)
	// Every problem in the order of the file's lines: the entries' rules
	// are checked after the walk.
	slices.SortStableFunc(ch.errs, func(a, b error) int {
		return cmp.Compare(errLine(a), errLine(b))
	})
	if err := ch.err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func errLine(err error) int {
	if ce, ok := err.(*ConfigError); ok {
		return ce.Line
	}
	return 0
}

// Default returns the name of the default entry: where channels without a
// chain begin, and what Build builds. For a file without backends it is
// the backend the file selects (DefaultBackend when it names none).
func (c Config) Default() string {
	if c.entries != nil {
		return c.def
	}
	if c.Backend == "" {
		return DefaultBackend
	}
	return c.Backend
}

// decoder decodes the top-level section name, strictly, straight from its
// node, so that errors keep the file's lines.
func (c Config) decoder(name string, defaults func(any)) walimpls.ConfigDecoder {
	return c.entryDecoder(entry{name: name, path: name, node: c.sections[name]}, defaults)
}

// entryDecoder decodes e's settings, strictly, straight from its node: the
// keys of the type decoded into, and "kind" for an entry of backends.
func (c Config) entryDecoder(e entry, defaults func(any)) walimpls.ConfigDecoder {
	return func(into any) error {
		if defaults != nil {
			defaults(into)
		}
		if e.node == nil {
			return nil
		}
		t := reflect.TypeOf(into)
		if e.inBackends {
			t = withKind(t)
		}
		ch := checker{file: c.file}
		ch.check(e.node, t, e.path)
		if err := ch.err(); err != nil {
			return err
		}
		// Not strict: the check was; "kind" is not into's.
		if err := e.node.Decode(into); err != nil {
			return &ConfigError{File: c.file, Line: e.node.Line, Path: e.path, Msg: yamlMessage(err), Err: err}
		}
		return nil
	}
}

// refused turns an error a layer returned for the section name's values
// into a ConfigError at the line of the key it names (the section's line
// when it names none of the keys present), keeping err as the cause.
func (c Config) refused(name string, err error) error {
	return c.refusedAt(c.sections[name], name, err)
}

// refusedAt is refused for the settings node at path (nil: none).
func (c Config) refusedAt(node *yaml.Node, path string, err error) error {
	line := 0
	if node != nil {
		line = node.Line
		if k := namedKey(resolve(node), err.Error()); k != nil {
			line, path = k.Line, path+"."+k.Value
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
	for _, b := range []walimpls.Builder{local.NewBuilder(), memory.NewBuilder(memCluster), kafka.NewBuilder(), pulsar.NewBuilder(), s3.NewBuilder()} {
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
// backend the field of its kind is set; for a backend of the caller's own
// Registry none is.
type Backend struct {
	walimpls.Opener
	// Name is the entry's name in configuration: the backend's name in a
	// file without backends.
	Name string
	// Kind is the registered backend it was built with.
	Kind string

	Local  *local.Store
	Memory *memory.Opener
	Kafka  *kafka.Opener
	Pulsar *pulsar.Opener
	S3     *s3.Opener
}

func newBackend(name, kind string, o walimpls.Opener) *Backend {
	b := &Backend{Opener: o, Name: name, Kind: kind}
	switch o := o.(type) {
	case *local.Store:
		b.Local = o
	case *memory.Opener:
		b.Memory = o
	case *kafka.Opener:
		b.Kafka = o
	case *pulsar.Opener:
		b.Pulsar = o
	case *s3.Opener:
		b.S3 = o
	}
	return b
}

// registry is d.Registry, or Registry(nil).
func (d Deps) registry() (*walimpls.Registry, error) {
	if d.Registry != nil {
		return d.Registry, nil
	}
	return Registry(nil)
}

// Build builds the Opener of the default entry (Config.Default): the
// backend a file without backends selects. See BuildAll for every entry.
func Build(ctx context.Context, c Config, d Deps) (*Backend, error) {
	reg, err := d.registry()
	if err != nil {
		return nil, err
	}
	e, ok := c.entry(c.Default())
	if !ok {
		// Parse sets the default of every file with backends.
		return nil, errors.AssertionFailedf("selector: default entry %q not found", c.Default())
	}
	return c.build(ctx, reg, e, d.Logger, d.Registerer)
}

// build builds entry e's Opener with the builder of its kind in reg.
func (c Config) build(ctx context.Context, reg *walimpls.Registry, e entry, logger *slog.Logger, registerer prometheus.Registerer) (*Backend, error) {
	b, err := reg.Lookup(e.kind)
	if err != nil {
		return nil, c.unknownBackend(e, reg)
	}
	if e.kind == s3.Name {
		// Its refusals before the builder's: an endpoint with user
		// information is refused without being repeated.
		if _, err := c.s3Params(e); err != nil {
			return nil, err
		}
	}
	var defaults func(any)
	if e.kind == local.Name {
		defaults = func(into any) {
			if lc, ok := into.(*local.Config); ok && lc.Dir == "" {
				lc.Dir = DefaultLocalDir
			}
		}
	}
	// decodeErr keeps the decoder's own error, which the builder flattens
	// into its text.
	var decodeErr error
	decode := c.entryDecoder(e, defaults)
	o, err := b.Build(ctx, walimpls.BuildParams{Config: func(into any) error {
		decodeErr = decode(into)
		return decodeErr
	}, Logger: logger, Registerer: registerer})
	if err != nil {
		if decodeErr != nil {
			return nil, decodeErr
		}
		if errors.Is(err, walimpls.ErrInvalidConfig) {
			if e.node == nil {
				return nil, &ConfigError{File: c.file, Line: e.line(), Path: e.path, Msg: err.Error(), Err: err}
			}
			return nil, c.refusedAt(e.node, e.path, err)
		}
		if !e.inBackends {
			return nil, errors.Wrapf(err, "selector: build %s", e.name)
		}
		return nil, errors.Wrap(err, configerr.Format("selector", c.file, e.line(), e.path, "build"))
	}
	if o == nil {
		return nil, errors.Newf("selector: build %s: backend %s returned no opener", e.name, e.kind)
	}
	return newBackend(e.name, e.kind, o), nil
}

// unknownBackend is the error for an entry whose kind reg does not hold:
// at the line of the backend or kind key, with a near miss and the
// registered names.
func (c Config) unknownBackend(e entry, reg *walimpls.Registry) error {
	hint := ""
	if s := suggest(e.kind, reg.Names()); strings.HasPrefix(s, " (did you mean") {
		hint = ": " + strings.TrimSuffix(strings.TrimPrefix(s, " ("), ")")
	}
	names := strings.Join(reg.Names(), ", ")
	if names == "" {
		names = "none"
	}
	if !e.inBackends {
		where := configerr.Format("selector", c.file, line(c.backendNode), "", "")
		return errors.Wrapf(walimpls.ErrUnknownBackend, "%sbackend %q%s (registered: %s)", where, e.kind, hint, names)
	}
	if e.kindNode == nil {
		where := configerr.Format("selector", c.file, e.line(), e.path, "")
		return errors.Wrapf(walimpls.ErrUnknownBackend, "%sno kind, and %q is no registered backend%s: add kind: (registered: %s)",
			where, e.name, hint, names)
	}
	where := configerr.Format("selector", c.file, line(e.kindNode), join(e.path, "kind"), "")
	return errors.Wrapf(walimpls.ErrUnknownBackend, "%sbackend %q%s (registered: %s)", where, e.kind, hint, names)
}
