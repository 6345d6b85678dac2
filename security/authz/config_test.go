package authz_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/security/authz"
)

const goodPolicy = `
roles:
  producer:
    - actions: [append]
      channels: ["orders-*", pch-0]
  reader:
    - actions: [read]
      channels: ["*"]
principals:
  alice:
    roles: [producer, reader]
  billing:
    roles: [reader]
    tokens:
      - %s
`

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

func TestLoad(t *testing.T) {
	token, hash, err := authz.NewToken(nil)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(token, authz.TokenPrefix))
	require.Equal(t, authz.HashToken(token), hash)
	c, err := authz.Load(writePolicy(t, strings.Replace(goodPolicy, "%s", hash, 1)))
	require.NoError(t, err)
	require.Equal(t, []string{"producer", "reader"}, c.Principals["alice"].Roles)
	require.Equal(t, []string{hash}, c.Principals["billing"].Tokens)
	p, err := authz.Compile(c)
	require.NoError(t, err)
	alice := p.Principal("alice")
	require.True(t, alice.Allows(authz.ActionAppend, "orders-1"))
	require.True(t, alice.Allows(authz.ActionAppend, "pch-0"))
	require.False(t, alice.Allows(authz.ActionAppend, "pch-01"))
	require.False(t, alice.Allows(authz.ActionAdmin, "pch-0"))
	require.True(t, alice.Allows(authz.ActionRead, "anything"))

	empty, err := authz.Parse(nil)
	require.NoError(t, err, "an empty policy is valid and grants nothing")
	p, err = authz.Compile(empty)
	require.NoError(t, err)
	require.False(t, p.Principal("alice").Allows(authz.ActionRead, "pch-0"))
}

// TestLoadRefuses: each misconfiguration is refused with the file, the
// line, the key path and the reason, and a token never appears in the
// message.
func TestLoadRefuses(t *testing.T) {
	token, _, err := authz.NewToken(nil)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		text string
		want string // file:line: path: reason, after the file name
	}{
		"token in plain text": {
			text: strings.Replace(goodPolicy, "%s", token, 1),
			want: ":15: principals.billing.tokens[0]: a token in plain text",
		},
		"something else where a hash is expected": {
			text: strings.Replace(goodPolicy, "%s", "hunter2", 1),
			want: ":15: principals.billing.tokens[0]: not a token hash",
		},
		"short hash": {
			text: strings.Replace(goodPolicy, "%s", "sha256:abcd", 1),
			want: `:15: principals.billing.tokens[0]: not a token hash: "sha256:" takes 64`,
		},
		"unknown role": {
			text: strings.Replace(strings.Replace(goodPolicy, "[producer, reader]", "[producer, writer]", 1), "%s", authz.HashToken("x"), 1),
			want: `:11: principals.alice.roles[1]: unknown role "writer" (roles: producer, reader)`,
		},
		"unknown action": {
			text: strings.Replace(strings.Replace(goodPolicy, "[append]", "[write]", 1), "%s", authz.HashToken("x"), 1),
			want: `:4: roles.producer[0].actions[0]: unknown action "write"`,
		},
		"bad pattern": {
			text: strings.Replace(strings.Replace(goodPolicy, `"orders-*"`, `"or*ders"`, 1), "%s", authz.HashToken("x"), 1),
			want: `:5: roles.producer[0].channels[0]: pattern "or*ders": "*" is only allowed last`,
		},
		"unknown key": {
			text: "roles: {}\nprincipal: {}\n",
			want: `:2: unknown key "principal"`,
		},
		"token where a list is expected": {
			text: "principals:\n  bob:\n    roles: [r]\n    tokens: " + token + "\n",
			want: `:4: a value of the wrong type`,
		},
		"same hash twice": {
			text: "roles:\n  r: [{actions: [read], channels: ['*']}]\nprincipals:\n  a: {roles: [r], tokens: [" + authz.HashToken("x") + "]}\n  b: {roles: [r], tokens: [" + authz.HashToken("x") + "]}\n",
			want: `:5: principals.b.tokens[0]: the same token hash is listed under principal "a" too`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := writePolicy(t, tc.text)
			_, err := authz.Load(path)
			require.Error(t, err)
			errmarktest.Is(t, err, authz.ErrInvalidPolicy)
			require.Contains(t, err.Error(), "authz: "+path+tc.want)
			require.NotContains(t, err.Error(), token)
		})
	}
	_, err = authz.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	errmarktest.Is(t, err, authz.ErrInvalidPolicy)
}

func TestValidate(t *testing.T) {
	err := authz.Config{Roles: map[string][]authz.Grant{"r": {{}}}}.Validate()
	require.ErrorContains(t, err, "roles.r[0].actions: no action")
	require.ErrorContains(t, err, "roles.r[0].channels: no channel pattern")
	_, err = authz.Compile(authz.Config{Principals: map[string]authz.Binding{"a": {Roles: []string{"nope"}}}})
	require.ErrorContains(t, err, `principals.a.roles[0]: unknown role "nope"`)
}
