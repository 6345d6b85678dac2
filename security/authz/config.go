package authz

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"go.yaml.in/yaml/v3"

	"github.com/streamwal/streamwal/internal/configerr"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/walimpls"
)

// ErrInvalidPolicy means a policy does not load or validate. Every such
// error is a *ConfigError (or several joined) that matches it.
var ErrInvalidPolicy = errors.New("authz: invalid policy")

// Action is what a grant allows.
type Action string

// The actions.
const (
	ActionAppend Action = "append"
	ActionRead   Action = "read"
	ActionAdmin  Action = "admin"
	// ActionCommit commits a consumer's checkpoint: the owner may then
	// delete what every consumer of the channel is past.
	ActionCommit Action = "commit"
)

// Actions are every action, in the order of their index in a policy.
var actions = [...]Action{ActionAppend, ActionRead, ActionAdmin, ActionCommit}

// index is a's position in actions, or -1.
func (a Action) index() int {
	switch a {
	case ActionAppend:
		return 0
	case ActionRead:
		return 1
	case ActionAdmin:
		return 2
	case ActionCommit:
		return 3
	}
	return -1
}

// Config is a policy as written: the roles, and the principals bound to
// them. The zero value is a policy that grants nothing. Load and Parse
// read one from YAML; Validate checks one built in code; Compile turns a
// valid one into a Policy.
type Config struct {
	// Roles maps a role's name to its grants.
	Roles map[string][]Grant `yaml:"roles"`
	// Principals maps a principal's name to its roles and token hashes.
	Principals map[string]Binding `yaml:"principals"`
}

// Grant gives actions on channels.
type Grant struct {
	// Actions are "append", "read", "admin" or "commit"; at least one.
	Actions []Action `yaml:"actions"`
	// Channels are patterns: a name, a prefix ending in "*", or "*";
	// at least one.
	Channels []string `yaml:"channels"`
}

// Binding is one principal's entry: its roles and tokens.
type Binding struct {
	// Roles are the names of roles in Config.Roles.
	Roles []string `yaml:"roles"`
	// Tokens are the hashes ("sha256:<64 hex digits>") of the bearer
	// tokens that authenticate as this principal; none for a principal
	// that authenticates by certificate only.
	Tokens []string `yaml:"tokens"`
}

// ConfigError is one problem of a policy: where it is and what is wrong.
// It matches ErrInvalidPolicy.
type ConfigError struct {
	// File is the policy file's name; empty when it came from Parse or
	// Validate.
	File string
	// Line is the 1-based line of the offending key or value; 0 when
	// unknown.
	Line int
	// Path is the key path, such as "principals.billing.tokens[0]".
	Path string
	// Msg says what is wrong. It never holds a token.
	Msg string
}

func (e *ConfigError) Error() string {
	return configerr.Format("authz", e.File, e.Line, e.Path, e.Msg)
}

// Is makes a ConfigError match ErrInvalidPolicy.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidPolicy }

// maxProblems bounds the problems Validate reports at once.
const maxProblems = 20

// Validate reports every problem of the policy (up to 20), joined: unknown
// actions, invalid patterns, a grant with no action or channel, a role
// bound but not defined, a token that is not a hash, a hash listed twice.
func (c Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		if len(errs) < maxProblems {
			errs = append(errs, &ConfigError{Path: path, Msg: fmt.Sprintf(format, args...)})
		}
	}
	for _, role := range sortedKeys(c.Roles) {
		rp := "roles." + role
		if role == "" {
			add(rp, "empty role name")
		}
		if len(c.Roles[role]) == 0 {
			add(rp, "a role without grants (remove it, or give it one)")
		}
		for i, g := range c.Roles[role] {
			gp := fmt.Sprintf("%s[%d]", rp, i)
			if len(g.Actions) == 0 {
				add(gp+".actions", "no action (append, read, admin or commit)")
			}
			for j, a := range g.Actions {
				if a.index() < 0 {
					add(fmt.Sprintf("%s.actions[%d]", gp, j), "unknown action %q (append, read, admin or commit)", string(a))
				}
			}
			if len(g.Channels) == 0 {
				add(gp+".channels", `no channel pattern (a name, a prefix ending in "*", or "*")`)
			}
			for j, p := range g.Channels {
				if err := validatePattern(p); err != nil {
					add(fmt.Sprintf("%s.channels[%d]", gp, j), "%s", err)
				}
			}
		}
	}
	owner := map[string]string{} // token hash -> principal
	for _, name := range sortedKeys(c.Principals) {
		pp := "principals." + name
		if name == "" {
			add(pp, "empty principal name")
		}
		if reservedPrincipal(name) {
			add(pp, "reserved name: %q and names starting with \"streamwal-\" are etcd's users of root and of the nodes, never a principal's", EtcdRootUser)
		}
		pr := c.Principals[name]
		if len(pr.Roles) == 0 {
			add(pp+".roles", "no role (a principal without roles may do nothing: remove it)")
		}
		for i, r := range pr.Roles {
			if _, ok := c.Roles[r]; !ok {
				add(fmt.Sprintf("%s.roles[%d]", pp, i), "unknown role %q (roles: %s)", r, strings.Join(sortedKeys(c.Roles), ", "))
			}
		}
		for i, h := range pr.Tokens {
			tp := fmt.Sprintf("%s.tokens[%d]", pp, i)
			if _, err := parseHash(h); err != nil {
				add(tp, "%s", err)
				continue
			}
			if prev, ok := owner[h]; ok {
				add(tp, "the same token hash is listed under principal %q too", prev)
				continue
			}
			owner[h] = name
		}
	}
	return joined(errs)
}

func joined(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// validatePattern checks a grant's channel pattern.
func validatePattern(p string) error {
	if p == "*" {
		return nil
	}
	name, prefix := strings.CutSuffix(p, "*")
	if strings.Contains(name, "*") {
		return errors.Newf("pattern %q: \"*\" is only allowed last", p)
	}
	if name == "" {
		return errors.New(`empty pattern (a name, a prefix ending in "*", or "*")`)
	}
	if err := walimpls.ValidateChannelName(name); err != nil {
		what := "name"
		if prefix {
			what = "prefix"
		}
		return errors.Newf("pattern %q: the %s is no channel name: %v", p, what, err)
	}
	return nil
}

// hashPrefix starts every token hash in a policy.
const hashPrefix = "sha256:"

// hashPattern is a token hash as a policy holds it.
var hashPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// parseHash decodes a token hash, and says what is wrong with anything
// else without repeating it (it may be a token).
func parseHash(s string) ([32]byte, error) {
	var h [32]byte
	if !hashPattern.MatchString(s) {
		switch {
		case strings.HasPrefix(s, TokenPrefix):
			return h, errors.New("a token in plain text; the file holds only its hash (walctl token create prints the line to put here)")
		case strings.HasPrefix(strings.ToLower(s), hashPrefix):
			return h, errors.New(`not a token hash: "sha256:" takes 64 lower-case hex digits`)
		default:
			return h, errors.New(`not a token hash ("sha256:" and 64 lower-case hex digits); if this is a token, it must not be in the file: put its hash here (walctl token create prints it)`)
		}
	}
	for i := range h {
		v, _ := strconv.ParseUint(s[len(hashPrefix)+2*i:len(hashPrefix)+2*i+2], 16, 8)
		h[i] = byte(v)
	}
	return h, nil
}

// Parse reads a policy from YAML and validates it; errors carry the line
// of the offending key or value.
func Parse(data []byte) (Config, error) { return parse("", data) }

// Load reads and validates the policy file at path; errors carry the file,
// the line and the key path.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, errmark.Mark(errors.Wrapf(err, "authz: policy %s", path), ErrInvalidPolicy)
	}
	return parse(path, data)
}

func parse(file string, data []byte) (Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return Config{}, yamlError(file, err)
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, yamlError(file, err)
	}
	err := c.Validate()
	if err == nil {
		return c, nil
	}
	var problems []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		problems = j.Unwrap()
	} else {
		problems = []error{err}
	}
	for _, p := range problems {
		var ce *ConfigError
		if errors.As(p, &ce) {
			ce.File = file
			ce.Line = lineOf(&root, ce.Path)
		}
	}
	return Config{}, err
}

// yamlLine is the "line N: " of a yaml.v3 message.
var yamlLine = regexp.MustCompile(`line (\d+): `)

// yamlError turns yaml.v3's errors (syntax, unknown field, wrong type,
// duplicate key) into ConfigErrors with their lines. yaml's messages quote
// the offending value, which could be a token written where a list was
// expected: only the line and the kind of problem are kept.
func yamlError(file string, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var errs []error
	for _, m := range msgs {
		ce := &ConfigError{File: file, Msg: "not YAML"}
		if sm := yamlLine.FindStringSubmatch(m); sm != nil {
			ce.Line, _ = strconv.Atoi(sm[1])
		}
		switch {
		case strings.Contains(m, "not found in type"):
			ce.Msg = "unknown key " + quoted(m, "field ") + " (roles and principals only; see package authz)"
		case strings.Contains(m, "already defined"):
			ce.Msg = "duplicate key"
		case strings.Contains(m, "cannot unmarshal"):
			ce.Msg = "a value of the wrong type (see package authz for the format)"
		}
		errs = append(errs, ce)
	}
	return joined(errs)
}

// quoted is the word after marker in m (a yaml field name: no secret).
func quoted(m, marker string) string {
	_, rest, ok := strings.Cut(m, marker)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return strconv.Quote(name)
}

// lineOf finds the line of the node at a key path such as
// "principals.billing.tokens[0]" ("" or anything not found: 0).
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, part := range splitPath(path) {
		next, ok := child(n, part)
		if !ok {
			break
		}
		n = next
		line = n.Line
	}
	return line
}

// splitPath splits "a.b[1].c" into "a", "b", "[1]", "c". Role and
// principal names may hold dots; the walk then stops early and the line
// of the last part found is used.
func splitPath(path string) []string {
	var parts []string
	for _, p := range strings.Split(path, ".") {
		for {
			i := strings.IndexByte(p, '[')
			if i < 0 {
				break
			}
			if i > 0 {
				parts = append(parts, p[:i])
			}
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				break
			}
			parts = append(parts, p[i:i+j+1])
			p = p[i+j+1:]
		}
		if p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}

func child(n *yaml.Node, part string) (*yaml.Node, bool) {
	if strings.HasPrefix(part, "[") {
		i, err := strconv.Atoi(strings.Trim(part, "[]"))
		if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
			return nil, false
		}
		return n.Content[i], true
	}
	if n.Kind != yaml.MappingNode {
		return nil, false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == part {
			return n.Content[i+1], true
		}
	}
	return nil, false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
