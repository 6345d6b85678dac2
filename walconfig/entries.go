package walconfig

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// entry is one backend the configuration names: an entry of "backends",
// or, in a file without backends, the chosen backend and its top-level
// section.
type entry struct {
	// name is the entry's name (chain.Backend.Name).
	name string
	// kind is the registered backend it is built with (chain.Backend.Kind).
	kind string
	// path is the key path of its settings: "backends.<name>", or the
	// section's name in a file without backends.
	path string
	// key is the entry's key in backends; nil in a file without backends.
	key *yaml.Node
	// kindNode is the value of its "kind" key; nil when the kind is the
	// entry's name.
	kindNode *yaml.Node
	// node holds its settings; nil when there are none.
	node *yaml.Node
	// inBackends is set for an entry of backends, whose settings may hold
	// "kind" besides its backend's keys.
	inBackends bool
}

// line is the line of the entry in the file, or 0.
func (e entry) line() int {
	if e.key != nil {
		return e.key.Line
	}
	return line(e.node)
}

// compiledKinds are the names of the backends Registry compiles in.
func compiledKinds() []string {
	return []string{kafka.Name, local.Name, memory.Name, pulsar.Name, s3.Name}
}

// kindType returns the settings type of a compiled-in backend: Parse
// checks an entry of that kind against it.
func kindType(kind string) (reflect.Type, bool) {
	switch kind {
	case local.Name:
		return reflect.TypeFor[local.Config](), true
	case memory.Name:
		return reflect.TypeFor[memory.Config](), true
	case kafka.Name:
		return reflect.TypeFor[kafka.Config](), true
	case pulsar.Name:
		return reflect.TypeFor[pulsar.Config](), true
	case s3.Name:
		return reflect.TypeFor[s3.Config](), true
	}
	return nil, false
}

// withKind returns the shape of an entry of backends whose settings decode
// into t: t's keys and "kind".
func withKind(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return t // a map, say: any key goes, "kind" too
	}
	return reflect.StructOf([]reflect.StructField{
		{Name: "Kind", Type: reflect.TypeFor[string](), Tag: `yaml:"kind"`},
		{Name: "Settings", Type: t, Tag: `yaml:",inline"`},
	})
}

// validEntryName reports what is wrong with an entry's name, or "". An
// entry's name is recorded as chain.Backend.Name; the rule here is
// narrower than chain's (no upper case, no '.' or '_'), so that two names
// differ in more than case or punctuation.
func validEntryName(name string) string {
	const rule = "want 1 to %d bytes of [a-z0-9-], beginning with a letter or a digit"
	if name == "" || len(name) > chain.MaxNameLen || name[0] == '-' {
		return fmt.Sprintf(rule, chain.MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if b := name[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-') {
			return fmt.Sprintf("byte %q at %d: "+rule, b, i, chain.MaxNameLen)
		}
	}
	return ""
}

// topKey returns the key name of mapping root, or nil (a key that comes
// from a merge has none of its own).
func topKey(root *yaml.Node, name string) *yaml.Node {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Kind == yaml.ScalarNode && k.Value == name {
			return k
		}
	}
	return nil
}

// keyOrValue is the node errors about a top-level key name point at: the
// key when the file has it, else its value.
func keyOrValue(root *yaml.Node, name string, value *yaml.Node) *yaml.Node {
	if k := topKey(root, name); k != nil {
		return k
	}
	return value
}

// parseEntries reads and checks "backends" and "default" (nil when the
// file has none), reporting each problem to ch: entry names, duplicates,
// each entry's keys against its kind's settings (for a compiled-in kind;
// the others are checked when built, against the type their builder
// decodes into), default naming an entry, and backend and the top-level
// backend sections beside backends.
func (c *Config) parseEntries(ch *checker, root, backends, def *yaml.Node) {
	if backends == nil {
		if def != nil {
			ch.add(keyOrValue(root, "default", def), "default",
				"default names the default entry of backends, and there is none: name the backend in backend: instead")
		}
		return
	}
	bkey := keyOrValue(root, "backends", backends)
	for _, name := range compiledKinds() {
		if _, ok := c.sections[name]; ok {
			ch.add(keyOrValue(root, name, c.sections[name]), name,
				"a backend's settings go in its entry of backends: move them to backends.%s (with kind: %s when that entry has another name)", name, name)
		}
	}
	bn := resolve(backends)
	if isNull(bn) || (bn.Kind == yaml.MappingNode && len(bn.Content) == 0) {
		ch.add(bkey, "backends", "no entries: name at least one backend, or remove backends")
		return
	}
	if bn.Kind != yaml.MappingNode {
		return // the walk reported it
	}
	c.entries = map[string]entry{}
	for i := 0; i+1 < len(bn.Content); i += 2 {
		k, v := bn.Content[i], bn.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			continue // the walk reported it
		}
		name, path := k.Value, join("backends", k.Value)
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			ch.add(k, "backends.<<", "merge keys are not supported between entries: write each entry out (an entry's settings may merge)")
			continue
		}
		if msg := validEntryName(name); msg != "" {
			ch.add(k, path, "entry name %q: %s", name, msg)
			continue
		}
		if first, dup := c.entries[name]; dup {
			ch.add(k, path, "duplicate key (first at line %d)", first.key.Line)
			continue
		}
		e := entry{name: name, kind: name, path: path, key: k, inBackends: true}
		if n := resolve(v); n != nil && !isNull(n) {
			e.node = v
			if n.Kind != yaml.MappingNode {
				ch.add(n, path, "want a mapping of keys to values, got %s", describeNode(n))
				c.entries[name] = e
				continue
			}
			// Lenient: this only finds the kind (through merges too); the
			// check below, or the build, checks the whole entry.
			var kv struct {
				Kind yaml.Node `yaml:"kind"`
			}
			if err := n.Decode(&kv); err == nil && kv.Kind.Kind != 0 && !isNull(&kv.Kind) {
				kn := kv.Kind
				e.kindNode = &kn
				if kn.Kind != yaml.ScalarNode || kn.ShortTag() != "!!str" || kn.Value == "" {
					ch.add(&kn, join(path, "kind"), "want a backend's name, got %s", describeNode(&kn))
				} else {
					e.kind = kn.Value
				}
			}
			if t, ok := kindType(e.kind); ok {
				ch.check(v, withKind(t), path)
			}
		}
		c.entries[name] = e
	}
	names := slices.Sorted(maps.Keys(c.entries))
	switch {
	case def != nil:
		var d string
		if err := def.Decode(&d); err != nil {
			break // the walk reported it
		}
		if _, ok := c.entries[d]; !ok {
			ch.add(def, "default", "%q is no entry of backends%s", d, entriesHint(d, names))
			break
		}
		c.def = d
	case c.Backend != "":
		// Checked below, with backend.
	case len(c.entries) == 1:
		c.def = names[0]
	case len(c.entries) > 1:
		ch.add(bkey, "backends", "%d entries and no default: name the one channels without a chain begin on, such as default: %s",
			len(c.entries), names[0])
	}
	if c.Backend == "" {
		return
	}
	switch _, ok := c.entries[c.Backend]; {
	case !ok:
		ch.add(c.backendNode, "backend", "%q is no entry of backends%s: beside backends, name the default entry in default: and remove backend:",
			c.Backend, entriesHint(c.Backend, names))
	case def != nil && c.def != "" && c.def != c.Backend:
		ch.add(c.backendNode, "backend", "%q disagrees with default %q: beside backends, name the default entry in default: and remove backend:",
			c.Backend, c.def)
	case def == nil:
		c.def = c.Backend
	}
}

// entriesHint is " (did you mean "x"?; entries: ...)" or " (entries: ...)".
func entriesHint(name string, names []string) string {
	list := "entries: " + strings.Join(names, ", ")
	if s := suggest(name, names); strings.HasPrefix(s, " (did you mean") {
		return strings.TrimSuffix(s, ")") + "; " + list + ")"
	}
	return " (" + list + ")"
}

// entry returns the entry name: of backends, or, in a file without
// backends, the chosen backend's (and only that).
func (c Config) entry(name string) (entry, bool) {
	if c.entries != nil {
		e, ok := c.entries[name]
		return e, ok
	}
	if name != c.Default() {
		return entry{}, false
	}
	return entry{name: name, kind: name, path: name, node: c.sections[name]}, true
}

// entryNames returns the names of the entries, sorted.
func (c Config) entryNames() []string {
	if c.entries != nil {
		return slices.Sorted(maps.Keys(c.entries))
	}
	return []string{c.Default()}
}
