package walconfig

import (
	"encoding"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"go.yaml.in/yaml/v3"

	"github.com/streamwal/streamwal/internal/configerr"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// ConfigError is one problem of a configuration: where it is (the file,
// the line of the offending key or value, and its key path) and what is
// wrong. It matches walimpls.ErrInvalidConfig with errors.Is, and unwraps to
// Err, the error of the layer that refused the value, when there is one.
//
// Its text reads
//
//	selector: node.yaml:4: local.segmentByte: unknown key (did you mean "segmentBytes"?)
//
// with "line 4" in place of "node.yaml:4" for a configuration given by
// Parse. Parse and Load report every problem of a file at once: their error
// then joins one ConfigError per problem (errors.As finds the first).
type ConfigError struct {
	// File is the configuration file's name; empty for Parse.
	File string
	// Line is the 1-based line of the offending key or value in the file;
	// 0 when unknown.
	Line int
	// Path is the key path, such as "local.segmentBytes" or
	// "kafka.seedBrokers[1]"; empty for the file as a whole.
	Path string
	// Msg says what is wrong.
	Msg string
	// Err is the cause, when another layer refused the value; may be nil.
	Err error
}

func (e *ConfigError) Error() string {
	return configerr.Format("selector", e.File, e.Line, e.Path, e.Msg)
}

// Unwrap returns the cause, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// Is makes every ConfigError match walimpls.ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == walimpls.ErrInvalidConfig }

// fileShape is the shape of a configuration file: every key a file may hold
// at its top level, with the type its section decodes into. Every backend
// that Registry compiles in has its section here (a test checks it). The
// entries of backends are checked by parseEntries, each against its kind.
type fileShape struct {
	Backend  string               `yaml:"backend"`
	Backends map[string]yaml.Node `yaml:"backends"`
	Default  string               `yaml:"default"`
	Meta     MetaConfig           `yaml:"meta"`
	Pool     pool.Config          `yaml:"pool"`
	// Retention is a node's (walnode's) retention of its channels' logs.
	Retention retention.Config `yaml:"retention"`
	Local     local.Config     `yaml:"local"`
	Memory    memory.Config    `yaml:"memory"`
	Kafka     kafka.Config     `yaml:"kafka"`
	Pulsar    pulsar.Config    `yaml:"pulsar"`
	S3        s3.Config        `yaml:"s3"`
}

// checker walks a yaml.Node beside the Go type it is to be decoded into and
// collects a ConfigError for each unknown key, duplicate key and value of
// the wrong type, with the node's own line (yaml.Node keeps the lines of the
// original text).
type checker struct {
	file string
	errs []error
	// visits counts the nodes checked: aliases make a small file a large
	// tree, so the walk stops at maxVisits ("billion laughs").
	visits int
}

const maxVisits = 100_000

// maxProblems bounds the problems reported for one file; the walk stops
// there.
const maxProblems = 20

func (c *checker) add(n *yaml.Node, path, format string, args ...any) {
	if len(c.errs) >= maxProblems {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	c.errs = append(c.errs, &ConfigError{File: c.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
	if len(c.errs) == maxProblems {
		c.visits = maxVisits // stop: these are enough to fix first
	}
}

// err returns nil, the one problem found, or all of them joined.
func (c *checker) err() error {
	switch len(c.errs) {
	case 0:
		return nil
	case 1:
		return c.errs[0]
	}
	return errors.Join(c.errs...)
}

var (
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType        = reflect.TypeFor[time.Duration]()
	nodeType            = reflect.TypeFor[yaml.Node]()
)

// check checks that n can be decoded into a value of type t, strictly.
func (c *checker) check(n *yaml.Node, t reflect.Type, path string) {
	n = resolve(n)
	if n == nil || isNull(n) {
		return // null leaves the value as it is
	}
	if c.visits >= maxVisits {
		return
	}
	if c.visits++; c.visits == maxVisits {
		c.add(n, path, "too many nodes through aliases (more than %d)", maxVisits)
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nodeType || t.Kind() == reflect.Interface {
		return // anything goes
	}
	if t != durationType && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		c.leaf(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			c.add(n, path, "want %s, got %s", describeType(t), describeNode(n))
			return
		}
		c.mapping(n, t, path, map[string]int{})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.add(n, path, "want %s, got %s", describeType(t), describeNode(n))
			return
		}
		for i := 0; i+1 < len(n.Content) && c.visits < maxVisits; i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			c.leaf(k, t.Key(), join(path, k.Value))
			c.check(v, t.Elem(), join(path, k.Value))
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			c.leaf(n, t, path) // []byte: a !!binary or a string
			return
		}
		if n.Kind != yaml.SequenceNode {
			c.add(n, path, "want %s, got %s", describeType(t), describeNode(n))
			return
		}
		for i, e := range n.Content {
			if c.visits >= maxVisits {
				break
			}
			c.check(e, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
	default:
		c.leaf(n, t, path)
	}
}

// mapping checks the keys and values of mapping n against struct type t;
// seen holds the line of each key already met at this level.
func (c *checker) mapping(n *yaml.Node, t reflect.Type, path string, seen map[string]int) {
	fields := structFields(t)
	for i := 0; i+1 < len(n.Content) && c.visits < maxVisits; i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge" {
			c.merge(v, t, path)
			continue
		}
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			c.add(k, path, "want a key name, got %s", describeNode(k))
			continue
		}
		ft, ok := fields[name]
		if !ok {
			c.add(k, join(path, name), "unknown key%s", suggest(name, slices.Sorted(maps.Keys(fields))))
			continue
		}
		if first, dup := seen[name]; dup {
			c.add(k, join(path, name), "duplicate key (first at line %d)", first)
			continue
		}
		seen[name] = k.Line
		c.check(v, ft, join(path, name))
	}
}

// merge checks the value of a "<<" merge key: a mapping, or a list of them.
func (c *checker) merge(v *yaml.Node, t reflect.Type, path string) {
	v = resolve(v)
	switch {
	case v == nil:
	case v.Kind == yaml.MappingNode:
		c.mapping(v, t, path, map[string]int{})
	case v.Kind == yaml.SequenceNode:
		for _, e := range v.Content {
			if e = resolve(e); e != nil && e.Kind == yaml.MappingNode {
				c.mapping(e, t, path, map[string]int{})
			} else {
				c.add(e, join(path, "<<"), "want a mapping to merge, got %s", describeNode(e))
			}
		}
	default:
		c.add(v, join(path, "<<"), "want a mapping to merge, got %s", describeNode(v))
	}
}

// leaf decodes n into a scratch value of type t and reports a failure.
func (c *checker) leaf(n *yaml.Node, t reflect.Type, path string) {
	n = resolve(n)
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode && t.Kind() != reflect.Struct && t.Kind() != reflect.Map && t.Kind() != reflect.Slice {
		c.add(n, path, "want %s, got %s", describeType(t), describeNode(n))
		return
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			c.add(n, path, "want %s, got %s", describeType(t), describeNode(n))
		} else {
			c.add(n, path, "%s", yamlMessage(err))
		}
	}
}

// structFields maps the yaml names of t's fields to their types, following
// yaml.v3's rules: the tag's name, else the lowercased field name; "-"
// skips a field; ",inline" lifts an embedded struct's fields.
func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range structFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describeType says in words what a value of type t looks like.
func describeType(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 250ms, 5s or 1m"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return "an integer that fits in " + t.Kind().String()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer that fits in " + t.Kind().String()
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping of keys to values"
	}
	return t.String()
}

// describeNode says what n is, quoting a string's text.
func describeNode(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 60 {
			v = v[:57] + "..."
		}
		if n.ShortTag() == "!!str" || v == "" || strings.ContainsAny(v, " \t\n\"") {
			return strconv.Quote(v)
		}
		return v // a number or a boolean, as written
	}
	return "an unexpected node"
}

// yamlLine is the "line N: " of a yaml.v3 message.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// yamlMessage is a yaml.v3 error's text without its "yaml: " prefix.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	return yamlLine.ReplaceAllString(msg, "")
}

// syntaxError turns a yaml.v3 parse error into a ConfigError. Its line is
// the parser's, which is often where the enclosing block starts rather than
// the offending character (yaml.v3 reports its context mark, for parser
// errors counted from 0), so it is given as "near line N" in the message and
// the ConfigError's Line, which promises the offending line, stays 0.
func syntaxError(file string, err error) error {
	msg := "invalid YAML: " + yamlMessage(err)
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		msg = "invalid YAML near line " + m[1] + ": " + yamlMessage(err)
	}
	return &ConfigError{File: file, Msg: msg, Err: err}
}

// suggest returns ` (did you mean "x"?)` for the known name closest to
// name, when it is close enough to be a misspelling, and otherwise the list
// of known names.
func suggest(name string, known []string) string {
	best, bestD := "", -1
	for _, k := range known {
		d := distance(normalize(name), normalize(k))
		if d <= maxTypos(k) && (bestD < 0 || d < bestD) {
			best, bestD = k, d
		}
	}
	if bestD >= 0 {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return " (known keys: " + strings.Join(known, ", ") + ")"
}

// maxTypos is how many edits still make a misspelling of a known name: one
// for short names, two for longer ones.
func maxTypos(known string) int {
	if len(known) <= 4 {
		return 1
	}
	return 2
}

// normalize folds the differences that are not typos: case, and the
// separators of snake_case and kebab-case ("segment_bytes" is segmentBytes).
func normalize(s string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
}

// distance is the optimal string alignment distance of a and b: the number
// of insertions, deletions, substitutions and transpositions of adjacent
// characters that turn a into b ("lcoal" is one from "local").
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// d[i][j] is the distance of ra[:i] and rb[:j]; three rows suffice.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
