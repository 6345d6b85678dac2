package authz_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/authz"
)

func policyOf(t testing.TB, channels ...string) authz.Principal {
	t.Helper()
	p, err := authz.Compile(authz.Config{
		Roles:      map[string][]authz.Grant{"r": {{Actions: []authz.Action{authz.ActionAppend}, Channels: channels}}},
		Principals: map[string]authz.Binding{"p": {Roles: []string{"r"}}},
	})
	require.NoError(t, err)
	return p.Principal("p")
}

// naive is the definition of a match.
func naive(patterns []string, name string) bool {
	for _, p := range patterns {
		if p == "*" || p == name && name != "" || strings.HasSuffix(p, "*") && strings.HasPrefix(name, strings.TrimSuffix(p, "*")) && name != "" {
			return true
		}
	}
	return false
}

// TestMatchAgainstNaive compares the compiled matcher with the definition
// on random patterns and names over a small alphabet (many prefixes of
// one another).
func TestMatchAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, 1+r.IntN(5))
		for i := range b {
			b[i] = "ab-"[r.IntN(3)]
		}
		return string(b)
	}
	for round := 0; round < 200; round++ {
		var patterns []string
		for i := 0; i < 1+r.IntN(20); i++ {
			if r.IntN(2) == 0 {
				patterns = append(patterns, word()+"*")
			} else {
				patterns = append(patterns, word())
			}
		}
		pr := policyOf(t, patterns...)
		for i := 0; i < 100; i++ {
			name := word()
			require.Equal(t, naive(patterns, name), pr.Allows(authz.ActionAppend, name), "patterns %v name %q", patterns, name)
		}
		require.False(t, pr.Allows(authz.ActionAppend, ""), "only * allows every channel")
		require.False(t, pr.Allows(authz.ActionRead, patterns[0]), "another action")
	}
	require.True(t, policyOf(t, "*").Allows(authz.ActionAppend, ""))
}

func TestVChannelRule(t *testing.T) {
	pr := policyOf(t, "pch-1", "tenant-a-*")
	seq := func(names ...string) func(func(string) bool) { return slices.Values(names) }
	for _, tc := range []struct {
		pchannel string
		vcs      []string
		want     bool
	}{
		{"pch-1", nil, true},                                  // the pchannel's grant covers all of it
		{"pch-1", []string{"tenant-b-1"}, true},               // whatever vchannel is in it
		{"pch-2", nil, false},                                 // no grant, not confined
		{"pch-2", []string{"tenant-a-1", "tenant-a-2"}, true}, // confined to granted vchannels
		{"pch-2", []string{"tenant-a-1", "tenant-b-1"}, false},
		{"pch-2", []string{"tenant-a-1", ""}, false}, // a message without a vchannel
		{"pch-2", []string{}, false},                 // no names: not confined
	} {
		var vcs func(func(string) bool)
		if tc.vcs != nil {
			vcs = seq(tc.vcs...)
		}
		require.Equal(t, tc.want, pr.AllowsIn(authz.ActionAppend, tc.pchannel, vcs), "%s %v", tc.pchannel, tc.vcs)
	}
	require.False(t, authz.Principal{Name: "x"}.Allows(authz.ActionRead, "pch-1"), "the zero principal holds nothing")
}

// BenchmarkDecision is the cost of one decision on a policy whose
// principal holds 10,000 channel prefixes (and 10,000 literal names), for
// a name that matches a prefix, one that matches none, and a literal.
func BenchmarkDecision(b *testing.B) {
	var patterns []string
	for i := 0; i < 10_000; i++ {
		patterns = append(patterns, fmt.Sprintf("tenant-%05d-*", i*7), fmt.Sprintf("chan-%05d", i))
	}
	pr := policyOf(b, patterns...)
	for name, ch := range map[string]string{
		"prefix":  "tenant-06993-orders-eu-west-1",
		"none":    "tenant-06994-orders-eu-west-1",
		"literal": "chan-04242",
	} {
		b.Run(name, func(b *testing.B) {
			want := name != "none"
			b.ReportAllocs()
			for b.Loop() {
				if pr.Allows(authz.ActionAppend, ch) != want {
					b.Fatal("wrong decision")
				}
			}
		})
	}
}
