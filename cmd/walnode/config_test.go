package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/walconfig"
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
	require.Equal(t, "memory", cfg.Default())
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

// The s3 flags configure an s3 entry beside local (and kafka), with the
// default where channels begin; contradictions are refused before
// anything starts.
func TestS3Flags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := t.TempDir()
	p := params{data: data, devS3: "127.0.0.1:0"}
	cfg, err := backendConfig(p)
	require.NoError(t, err)
	require.Equal(t, "s3", cfg.Default(), "-dev-s3 alone: channels begin on s3")
	st, creds, err := startDevS3(p)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	require.Equal(t, filepath.Join(data, "dev-s3-credentials"), creds)
	p.devS3 = strings.TrimPrefix(st.Endpoint, "http://")
	p.defaultBackend = "local"
	cfg, err = backendConfig(p)
	require.NoError(t, err)
	require.Equal(t, "local", cfg.Default())
	bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{})
	require.NoError(t, err, "the entry reaches the store with the credentials written for it")
	defer func() { require.NoError(t, bs.Close()) }()
	require.Equal(t, []string{"local", "s3"}, bs.Names())
	d, err := bs.Describe("s3")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf(`{"endpoint":%q,"bucket":"streamwal","prefix":"streamwal/","region":"us-east-1","pathStyle":true}`, st.Endpoint), string(d.Params))
	pc, ok, err := cfg.PoolConfig()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "pch-", pc.Prefix, "the pool of kafka's flags: the default may change between them")

	// A store of one's own, every flag, beside kafka.
	full := params{data: data, kafka: "127.0.0.1:9092", defaultBackend: "s3", s3: s3Flags{endpoint: "https://s3.example.com:9000", bucket: "wal",
		prefix: "n/", region: "eu-west-1", pathStyle: true, credentialsFile: "/etc/streamwal/creds"}}
	cfg, err = backendConfig(full)
	require.NoError(t, err)
	require.Equal(t, "s3", cfg.Default())

	for _, c := range []struct {
		name string
		p    params
		want string
	}{
		{"s3 flags without a bucket", params{s3: s3Flags{endpoint: "http://h:1"}}, "configure the s3 backend of -s3-bucket (or -dev-s3)"},
		{"dev-s3 and an endpoint", params{devS3: "127.0.0.1:0", s3: s3Flags{endpoint: "http://h:1"}}, "-dev-s3 runs the store the s3 backend uses"},
		{"both kafka and s3 without -default", params{kafka: "h:9092", s3: s3Flags{bucket: "b"}}, "both kafka and s3 are configured: name the backend new channels begin on"},
		{"-default s3 without s3", params{kafka: "h:9092", defaultBackend: "s3"}, "-default s3: the s3 backend is not configured"},
		{"-default kafka without kafka", params{s3: s3Flags{bucket: "b"}, defaultBackend: "kafka"}, "-default kafka: the kafka backend is not configured"},
		{"-default of no backend", params{s3: s3Flags{bucket: "b"}, defaultBackend: "pulsar"}, `-default "pulsar": not a backend walnode configures from flags`},
		{"s3 flags with -config", params{config: "node.yaml", s3: s3Flags{bucket: "b"}}, "-s3-* flags with -config"},
		{"a bad prefix", params{s3: s3Flags{bucket: "b", prefix: "wal"}}, `s3.prefix: s3: prefix "wal" must end with /`},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.p.data = t.TempDir()
			cfg, err := backendConfig(c.p)
			if err == nil {
				// Values are the backend's to refuse, when built.
				_, err = walconfig.BuildAll(ctx, cfg, walconfig.Deps{})
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}
