package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/walimpls"
)

// A -config file that misspells or mistypes a key stops the node before it
// starts anything, naming the file, the key's line and its path; a valid
// one is read as written.
func TestConfigFile(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"misspelt backend key", "bakend: kafka\n", `:1: bakend: unknown key (did you mean "backend"?)`},
		{"misspelt section", "backend: local\nlcoal: {dir: ./d2}\n", `:2: lcoal: unknown key (did you mean "local"?)`},
		{"misspelt pool key", "backend: local\npool:\n  size: 4\n  prefx: pch-\n", `:4: pool.prefx: unknown key (did you mean "prefix"?)`},
		{"wrong type", "backend: kafka\nkafka:\n  seedBrokers: [127.0.0.1:9092]\n  partitions: two\n", `:4: kafka.partitions: want an integer that fits in int32, got "two"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.yaml")
			require.NoError(t, os.WriteFile(path, []byte(c.yaml), 0o600))
			err := run(context.Background(), params{config: path, data: t.TempDir()}, slog.New(slog.DiscardHandler))
			require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
			require.Contains(t, err.Error(), "selector: "+path+c.want)
		})
	}

	path := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(path, []byte("backend: memory\npool:\n  size: 3\n  prefix: pch-\n"), 0o600))
	cfg, err := backendConfig(params{config: path})
	require.NoError(t, err)
	require.Equal(t, "memory", cfg.Chosen())
	pc, ok, err := cfg.PoolConfig()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 3, pc.Size)
	require.Equal(t, "pch-", pc.Prefix)
}

// A policy file that cannot be enforced stops the node before it starts
// anything (no etcd member, no data directory), with the file, the line,
// the key path and the reason.
func TestPolicyFile(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"token in plain text", "roles:\n  r: [{actions: [read], channels: ['*']}]\nprincipals:\n  a:\n    roles: [r]\n    tokens: [" + authz.TokenPrefix + "abc]\n",
			`:6: principals.a.tokens[0]: a token in plain text`},
		{"unknown role", "roles:\n  r: [{actions: [read], channels: ['*']}]\nprincipals:\n  a: {roles: [w]}\n",
			`:4: principals.a.roles[0]: unknown role "w"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policy.yaml")
			require.NoError(t, os.WriteFile(path, []byte(c.yaml), 0o600))
			data := filepath.Join(t.TempDir(), "data")
			err := run(context.Background(), params{authz: path, data: data}, slog.New(slog.DiscardHandler))
			require.ErrorIs(t, err, authz.ErrInvalidPolicy)
			require.Contains(t, err.Error(), "authz: "+path+c.want)
			_, statErr := os.Stat(data)
			require.True(t, os.IsNotExist(statErr), "nothing was started or written")
		})
	}
}
