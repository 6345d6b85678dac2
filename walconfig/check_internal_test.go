package walconfig

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0},
		{"local", "local", 0},
		{"", "abc", 3},
		{"bakend", "backend", 1}, // a deletion
		{"lcoal", "local", 1},    // a transposition
		{"segmentByte", "segmentBytes", 1},
		{"stor", "store", 1},
		{"kitten", "sitting", 3},
		{"memroy", "memory", 1},
		{"sink", "sync", 2},
	} {
		require.Equal(t, c.d, distance(c.a, c.b), "%q %q", c.a, c.b)
		require.Equal(t, c.d, distance(c.b, c.a), "%q %q", c.b, c.a)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"backend", "kafka", "local", "memory", "meta", "pool", "pulsar"}
	for name, want := range map[string]string{
		"bakend":   ` (did you mean "backend"?)`,
		"lcoal":    ` (did you mean "local"?)`,
		"Pool":     ` (did you mean "pool"?)`,
		"pol":      ` (did you mean "pool"?)`,
		"mtea":     ` (did you mean "meta"?)`,
		"kafak":    ` (did you mean "kafka"?)`,
		"xyz":      " (known keys: backend, kafka, local, memory, meta, pool, pulsar)",
		"mem":      " (known keys: backend, kafka, local, memory, meta, pool, pulsar)",
		"backends": ` (did you mean "backend"?)`,
	} {
		require.Equal(t, want, suggest(name, known), name)
	}
	require.Equal(t, ` (did you mean "segmentBytes"?)`, suggest("segment-bytes", []string{"dir", "segmentBytes", "sync"}))
}

// Aliases that make a small file an enormous tree stop the check.
func TestAliasBomb(t *testing.T) {
	text := "defs:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 8; i++ {
		text += fmt.Sprintf("  a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	text += "bomb: *a7\n" // 10^8 strings
	type shape struct {
		Defs any                    `yaml:"defs"`
		Bomb [][][][][][][][]string `yaml:"bomb"`
	}
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte(text), &doc))
	ch := checker{}
	ch.check(doc.Content[0], reflect.TypeFor[shape](), "")
	var ce *ConfigError
	require.ErrorAs(t, ch.err(), &ce)
	require.Equal(t, "too many nodes through aliases (more than 100000)", ce.Msg)
	require.Equal(t, "bomb[", ce.Path[:5])
}

// The walk stops at maxProblems.
func TestManyProblems(t *testing.T) {
	text := "local:\n"
	for i := range 100 {
		text += fmt.Sprintf("  k%d: 1\n", i)
	}
	_, err := Parse([]byte(text))
	var n int
	for e := err; e != nil; e = errors.Unwrap(e) {
		if m, ok := e.(interface{ Unwrap() []error }); ok {
			n = len(m.Unwrap())
			break
		}
	}
	require.Equal(t, maxProblems, n, "%v", err)
}
