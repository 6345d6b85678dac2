package walconfig_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	crdb "github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	stderrors "errors"

	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// writeConfig writes text to a file in a fresh temporary directory.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// problem is what one ConfigError must say.
type problem struct {
	line int
	path string
	msg  string // a part of Msg
}

// requireProblems checks that err reports exactly want, in order, each at
// its line of file and with its key path, and matches ErrInvalidConfig.
func requireProblems(t *testing.T, err error, file string, want ...problem) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.True(t, crdb.Is(err, walimpls.ErrInvalidConfig), "cockroachdb errors.Is too")
	var got []*walconfig.ConfigError
	for e := err; e != nil; e = stderrors.Unwrap(e) {
		if one, ok := e.(*walconfig.ConfigError); ok {
			got = append(got, one)
			break
		}
		if multi, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range multi.Unwrap() {
				var one *walconfig.ConfigError
				require.True(t, stderrors.As(e, &one), "%v", e)
				got = append(got, one)
			}
			break
		}
	}
	var first *walconfig.ConfigError
	require.True(t, stderrors.As(err, &first))
	require.NotEmpty(t, got)
	require.Same(t, got[0], first, "errors.As finds the first problem")
	require.Len(t, got, len(want), "%v", err)
	for i, w := range want {
		g := got[i]
		require.Equal(t, file, g.File, "%v", g)
		require.Equal(t, w.line, g.Line, "%v", g)
		require.Equal(t, w.path, g.Path, "%v", g)
		require.Contains(t, g.Msg, w.msg, "%v", g)
		prefix := "selector: "
		switch {
		case file != "" && w.line > 0:
			prefix += fmt.Sprintf("%s:%d: ", file, w.line)
		case file != "":
			prefix += file + ": "
		case w.line > 0:
			prefix += fmt.Sprintf("line %d: ", w.line)
		}
		require.True(t, strings.HasPrefix(g.Error(), prefix), "%v", g)
		require.Contains(t, err.Error(), g.Error())
	}
}

// Load and Parse refuse what a file misspells or mistypes, at the file's
// own line of the offending key or value, with its key path.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		yaml string
		want []problem
	}{{
		name: "misspelled top-level key",
		yaml: "bakend: memory\n",
		want: []problem{{1, "bakend", `unknown key (did you mean "backend"?)`}},
	}, {
		name: "misspelled backend section",
		yaml: "backend: local\n\nlcoal: {dir: ./d2}\n",
		want: []problem{{3, "lcoal", `unknown key (did you mean "local"?)`}},
	}, {
		name: "misspelled pool section",
		yaml: "backend: memory\npol:\n  size: 4\n",
		want: []problem{{2, "pol", `did you mean "pool"?`}},
	}, {
		name: "unknown top-level key, no near miss",
		yaml: "# comment\nbackend: memory\nwhatever: 1\n",
		want: []problem{{3, "whatever", "unknown key (known keys: backend, backends, default, kafka, local, memory, meta, pool, pulsar, retention, s3)"}},
	}, {
		name: "unknown nested key on line 4",
		yaml: "backend: local\nlocal:\n  dir: ./d\n  segmentByte: 1048576\n",
		want: []problem{{4, "local.segmentByte", `unknown key (did you mean "segmentBytes"?)`}},
	}, {
		name: "snake case of a known key",
		yaml: "local:\n  dir: ./d\n  segment_bytes: 1048576\n",
		want: []problem{{3, "local.segment_bytes", `did you mean "segmentBytes"?`}},
	}, {
		name: "unknown key two levels down",
		yaml: "backend: kafka\nkafka:\n  seedBrokers: [127.0.0.1:9092]\n  tls:\n    enabeld: true\n",
		want: []problem{{5, "kafka.tls.enabeld", `did you mean "enabled"?`}},
	}, {
		name: "unknown key in a backend that is not chosen",
		yaml: "backend: memory\npulsar:\n  serviceURL: pulsar://x:6650\n",
		want: []problem{{3, "pulsar.serviceURL", `did you mean "serviceUrl"?`}},
	}, {
		name: "unknown key of the meta section",
		yaml: "meta:\n  stor: bolt\n",
		want: []problem{{2, "meta.stor", `did you mean "store"?`}},
	}, {
		name: "unknown key, no near miss, lists the section's keys",
		yaml: "memory:\n  capacity: 3\n",
		want: []problem{{2, "memory.capacity", "unknown key (known keys: maxMessageBytes)"}},
	}, {
		name: "wrong type for a nested field",
		yaml: "backend: local\nlocal:\n  dir: ./d\n  segmentBytes: \"big\"\n",
		want: []problem{{4, "local.segmentBytes", `want an integer, got "big"`}},
	}, {
		name: "a number where a duration goes",
		yaml: "local:\n  dir: ./d\n  syncInterval: 10\n",
		want: []problem{{3, "local.syncInterval", "want a duration such as 250ms, 5s or 1m, got 10"}},
	}, {
		name: "out of range for the field",
		yaml: "kafka:\n  replicationFactor: 70000\n",
		want: []problem{{2, "kafka.replicationFactor", "want an integer that fits in int16, got 70000"}},
	}, {
		name: "wrong type in a list",
		yaml: "kafka:\n  seedBrokers:\n    - a:9092\n    - {host: b}\n",
		want: []problem{{4, "kafka.seedBrokers[1]", "want a string, got a mapping"}},
	}, {
		name: "a list where a string goes",
		yaml: "pool:\n  strategy: [round-robin]\n",
		want: []problem{{2, "pool.strategy", "want a string, got a list"}},
	}, {
		name: "a scalar where a section goes",
		yaml: "backend: local\nlocal: ./d\n",
		want: []problem{{2, "local", `want a mapping of keys to values, got "./d"`}},
	}, {
		name: "wrong type for backend",
		yaml: "backend: {name: local}\n",
		want: []problem{{1, "backend", "want a string, got a mapping"}},
	}, {
		name: "a duplicate key",
		yaml: "local:\n  dir: ./a\n  sync: none\n  dir: ./b\n",
		want: []problem{{4, "local.dir", "duplicate key (first at line 2)"}},
	}, {
		name: "every problem at once, in file order",
		yaml: "bakend: memory\nlocal:\n  dir: ./d\n  segmentByte: 1\n  sync: [always]\npool:\n  sise: 3\n",
		want: []problem{
			{1, "bakend", `did you mean "backend"?`},
			{4, "local.segmentByte", `did you mean "segmentBytes"?`},
			{5, "local.sync", "want a string, got a list"},
			{7, "pool.sise", `did you mean "size"?`},
		},
	}, {
		name: "not a mapping at all",
		yaml: "just words\n",
		want: []problem{{1, "", `want a mapping of keys to values, got "just words"`}},
	}, {
		name: "a YAML syntax error",
		yaml: "backend: [unclosed\n",
		want: []problem{{0, "", "invalid YAML near line 1: did not find expected ',' or ']'"}},
	}} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, c.yaml)
			_, err := walconfig.Load(path)
			requireProblems(t, err, path, c.want...)

			_, err = walconfig.Parse([]byte(c.yaml))
			requireProblems(t, err, "", c.want...)
		})
	}
}

// Values the backend, the meta section or the pool refuse once decoded are
// reported at the line of the key the refusal names.
func TestRefusedValues(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		yaml string
		use  func(walconfig.Config) error
		want problem
		is   error // another error the result must match
	}{{
		name: "local sync policy",
		yaml: "backend: local\nlocal:\n  dir: %DIR%\n  sync: sometimes\n",
		use: func(c walconfig.Config) error {
			_, err := walconfig.Build(ctx, c, walconfig.Deps{})
			return err
		},
		want: problem{4, "local.sync", `sync "sometimes" is not one of always, interval, none`},
	}, {
		name: "local segment size",
		yaml: "local:\n  dir: %DIR%\n  sync: none\n  segmentBytes: 1\n",
		use: func(c walconfig.Config) error {
			_, err := walconfig.Build(ctx, c, walconfig.Deps{})
			return err
		},
		want: problem{4, "local.segmentBytes", "segmentBytes 1 outside"},
	}, {
		name: "meta store",
		yaml: "backend: memory\nmeta:\n  store: zookeeper\n",
		use:  func(c walconfig.Config) error { _, err := c.Meta(); return err },
		want: problem{3, "meta.store", `store "zookeeper" is not bolt or etcd`},
	}, {
		name: "meta etcd without endpoints",
		yaml: "meta:\n  prefix: /x/\n  store: etcd\n",
		use:  func(c walconfig.Config) error { _, err := c.Meta(); return err },
		want: problem{3, "meta.store", "store etcd needs endpoints"},
	}, {
		name: "pool size",
		yaml: "pool:\n  name: orders\n  size: -2\n",
		use:  func(c walconfig.Config) error { _, _, err := c.PoolConfig(); return err },
		want: problem{3, "pool.size", "size -2"},
		is:   pool.ErrInvalidConfig,
	}, {
		name: "a key's name quoted as a value does not mislead",
		yaml: "pool:\n  prefix: p-\n  name: prefix\n  size: -2\n",
		use:  func(c walconfig.Config) error { _, _, err := c.PoolConfig(); return err },
		want: problem{4, "pool.size", `pool "prefix": size -2`},
		is:   pool.ErrInvalidConfig,
	}, {
		name: "retention cap",
		yaml: "retention:\n  maxBytes: 10\n  maxAge: -1h\n",
		use:  func(c walconfig.Config) error { _, err := c.RetentionConfig(); return err },
		want: problem{3, "retention.maxAge", "negative maxAge -1h0m0s"},
		is:   retention.ErrInvalidConfig,
	}, {
		name: "retention channel pattern",
		yaml: "retention:\n  channels:\n    orders/*: {maxAge: 1h}\n",
		use:  func(c walconfig.Config) error { _, err := c.RetentionConfig(); return err },
		want: problem{2, "retention.channels", `"orders/*" is neither a channel name nor a prefix ending in *`},
		is:   retention.ErrInvalidConfig,
	}, {
		name: "pool strategy",
		yaml: "pool:\n  strategy: round/robin\n",
		use:  func(c walconfig.Config) error { _, _, err := c.PoolConfig(); return err },
		want: problem{2, "pool.strategy", `strategy "round/robin"`},
		is:   pool.ErrInvalidConfig,
	}} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, strings.ReplaceAll(c.yaml, "%DIR%", t.TempDir()))
			cfg, err := walconfig.Load(path)
			require.NoError(t, err)
			err = c.use(cfg)
			requireProblems(t, err, path, c.want)
			if c.is != nil {
				require.ErrorIs(t, err, c.is)
			}
		})
	}
}

// An unknown backend name is ErrUnknownBackend, at its line, with a near
// miss.
func TestUnknownBackendName(t *testing.T) {
	path := writeConfig(t, "# node\nbackend: memroy\n")
	cfg, err := walconfig.Load(path)
	require.NoError(t, err, "the registry, known at Build, says which names exist")
	_, err = walconfig.Build(context.Background(), cfg, walconfig.Deps{})
	require.ErrorIs(t, err, walimpls.ErrUnknownBackend)
	require.Contains(t, err.Error(), "selector: "+path+`:2: backend "memroy": did you mean "memory"? (registered: kafka, local, memory, pulsar, s3)`)
}

// errCaptured stops a capturing builder's Build once it has decoded.
var errCaptured = stderrors.New("captured")

// capture is a Builder that records the configuration it decodes.
type capture struct {
	name string
	new  func() any
	got  map[string]any
}

func (c capture) Name() string { return c.name }

func (c capture) Build(_ context.Context, p walimpls.BuildParams) (walimpls.Opener, error) {
	v := c.new()
	if err := p.Config(v); err != nil {
		return nil, err
	}
	c.got[c.name] = v
	return nil, errCaptured
}

// oldDecode is how the selector decoded a section before it checked files
// itself: the section re-encoded, then decoded with known-fields checking.
func oldDecode(t *testing.T, data []byte, section string, into any) error {
	t.Helper()
	var raw map[string]yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &raw))
	node, ok := raw[section]
	if !ok {
		return nil
	}
	var buf bytes.Buffer
	require.NoError(t, yaml.NewEncoder(&buf).Encode(&node))
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	return dec.Decode(into)
}

// Valid files are accepted, from disk, and decode to what they did before
// the strict checks.
func TestValidFilesUnchanged(t *testing.T) {
	for _, c := range []struct {
		name string
		yaml string
		// want holds the expected decoding of the chosen backend's section.
		want any
		// before is the error the section's decoding returned before the
		// strict checks; empty: it decoded to want too.
		before string
	}{{
		name: "empty file",
		yaml: "",
		want: &local.Config{Dir: walconfig.DefaultLocalDir},
	}, {
		name: "comments only",
		yaml: "# nothing here yet\n",
		want: &local.Config{Dir: walconfig.DefaultLocalDir},
	}, {
		name: "the package documentation's example",
		yaml: "backend: local        # local (default) | memory | kafka | pulsar\nlocal:\n  dir: ./streamwal-data\n  sync: always\nkafka:\n  seedBrokers: [127.0.0.1:9092]\n\nmeta:\n  store: bolt\npool:\n  size: 16\n",
		want: &local.Config{Dir: "./streamwal-data", Sync: local.SyncAlways},
	}, {
		name: "every local key",
		yaml: "local:\n  dir: /var/lib/wal\n  segmentBytes: 1048576\n  sync: interval\n  syncInterval: 5ms\n  maxMessageBytes: 1024\n  readAheadBytes: 4096\n  maxBatchBytes: 65536\n  slowSync: 2s\n",
		want: &local.Config{Dir: "/var/lib/wal", SegmentBytes: 1 << 20, Sync: local.SyncInterval, SyncInterval: 5 * time.Millisecond,
			MaxMessageBytes: 1024, ReadAheadBytes: 4096, MaxBatchBytes: 65536, SlowSync: 2 * time.Second},
	}, {
		// Before: "local: decode config: EOF", from decoding the re-encoded
		// null; now the section's defaults, like no section.
		name:   "an empty local section keeps the default directory",
		yaml:   "local:\n",
		want:   &local.Config{Dir: walconfig.DefaultLocalDir},
		before: "EOF",
	}, {
		name: "memory, with other backends' sections",
		yaml: "backend: memory\nmemory:\n  maxMessageBytes: 1024\nlocal:\n  dir: /nonexistent/never/used\n",
		want: &memory.Config{MaxMessageBytes: 1024},
	}, {
		name: "the README's Kafka example",
		yaml: "backend: kafka\nkafka:\n  seedBrokers: [127.0.0.1:9092]\n  partitions: 2              # what the pool creates, for each pchannel\nmeta:\n  store: etcd\n  endpoints: [http://127.0.0.1:2379]\n  prefix: /streamwal/\npool:\n  size: 16\n  prefix: streamwal-pchannel-\n  strategy: round-robin      # or least-loaded\n",
		want: &kafka.Config{SeedBrokers: []string{"127.0.0.1:9092"}, Partitions: 2},
	}, {
		name: "kafka's nested sections, a map and an anchor",
		yaml: "backend: kafka\nkafka:\n  seedBrokers:\n    - a:9092\n    - b:9092\n  topicConfigs: {retention.ms: \"-1\"}\n  tls: &tls\n    enabled: true\n    caFile: /etc/ca.pem\n  sasl: {mechanism: PLAIN, username: u, password: p}\n  dialTimeout: 3s\n",
		want: &kafka.Config{SeedBrokers: []string{"a:9092", "b:9092"}, TopicConfigs: map[string]string{"retention.ms": "-1"},
			TLS: kafka.TLSFiles{Enabled: true, CAFile: "/etc/ca.pem"}, SASL: kafka.SASL{Mechanism: "PLAIN", Username: "u", Password: "p"}, DialTimeout: 3 * time.Second},
	}, {
		name: "pulsar",
		yaml: "backend: pulsar\npulsar:\n  serviceUrl: pulsar://127.0.0.1:6650\n  tenant: public\n  namespace: default\n  tls:\n    allowInsecureConnection: true\n  takeOverGrace: 1m\n  adminUrl: https://127.0.0.1:8443\n",
		want: &pulsar.Config{ServiceURL: "pulsar://127.0.0.1:6650", Tenant: "public", Namespace: "default",
			TLS: pulsar.TLS{AllowInsecureConnection: true}, TakeOverGrace: time.Minute, AdminURL: "https://127.0.0.1:8443"},
	}, {
		name: "the README's s3 example",
		yaml: "backend: s3\ns3:\n  endpoint: http://127.0.0.1:9000\n  bucket: streamwal\n  prefix: wal/\n  region: us-east-1\n  pathStyle: true\n  credentialsFile: /etc/streamwal/s3-credentials\n  flushInterval: 50ms\n  readAhead: 16\n",
		want: &s3.Config{Endpoint: "http://127.0.0.1:9000", Bucket: "streamwal", Prefix: "wal/", Region: "us-east-1", PathStyle: true,
			CredentialsFile: "/etc/streamwal/s3-credentials", FlushInterval: 50 * time.Millisecond, ReadAhead: 16},
	}, {
		name: "a merge key inside a section",
		yaml: "local:\n  <<: {dir: /merged, sync: none}\n  sync: always\n",
		want: &local.Config{Dir: "/merged", Sync: local.SyncAlways},
	}} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, c.yaml)
			cfg, err := walconfig.Load(path)
			require.NoError(t, err)

			got := map[string]any{}
			reg := walimpls.NewRegistry()
			for _, b := range []capture{
				{name: local.Name, new: func() any { return &local.Config{} }, got: got},
				{name: memory.Name, new: func() any { return &memory.Config{} }, got: got},
				{name: kafka.Name, new: func() any { return &kafka.Config{} }, got: got},
				{name: pulsar.Name, new: func() any { return &pulsar.Config{} }, got: got},
				{name: s3.Name, new: func() any { return &s3.Config{} }, got: got},
			} {
				require.NoError(t, reg.Register(b))
			}
			_, err = walconfig.Build(context.Background(), cfg, walconfig.Deps{Registry: reg})
			require.ErrorIs(t, err, errCaptured)
			require.Equal(t, c.want, got[cfg.Default()])

			// The same as the decoding before the strict checks.
			before := capture{new: func() any { return &local.Config{} }}
			switch cfg.Default() {
			case memory.Name:
				before.new = func() any { return &memory.Config{} }
			case kafka.Name:
				before.new = func() any { return &kafka.Config{} }
			case pulsar.Name:
				before.new = func() any { return &pulsar.Config{} }
			case s3.Name:
				before.new = func() any { return &s3.Config{} }
			}
			old := before.new()
			if lc, ok := old.(*local.Config); ok {
				lc.Dir = walconfig.DefaultLocalDir
			}
			if err := oldDecode(t, []byte(c.yaml), cfg.Default(), old); c.before != "" {
				require.EqualError(t, err, c.before)
			} else {
				require.NoError(t, err)
				require.Equal(t, old, got[cfg.Default()])
			}

			mc, err := cfg.Meta()
			require.NoError(t, err)
			var oldMeta walconfig.MetaConfig
			require.NoError(t, oldDecode(t, []byte(c.yaml), "meta", &oldMeta))
			if oldMeta.Store == "" {
				oldMeta.Store = walconfig.MetaBolt
			}
			if oldMeta.Store == walconfig.MetaBolt && oldMeta.Path == "" {
				dir := walconfig.DefaultLocalDir
				var lc local.Config
				if err := oldDecode(t, []byte(c.yaml), "local", &lc); err == nil && lc.Dir != "" {
					dir = lc.Dir
				}
				oldMeta.Path = filepath.Join(dir, "meta.db")
			}
			require.Equal(t, oldMeta, mc)

			pc, ok, err := cfg.PoolConfig()
			require.NoError(t, err)
			var oldPool pool.Config
			require.NoError(t, oldDecode(t, []byte(c.yaml), "pool", &oldPool))
			require.Equal(t, oldPool, pc)
			require.Equal(t, strings.Contains(c.yaml, "\npool:"), ok)
		})
	}
}

// Every compiled-in backend has a section a file may hold.
func TestEveryBackendHasASection(t *testing.T) {
	reg, err := walconfig.Registry(nil)
	require.NoError(t, err)
	for _, name := range reg.Names() {
		_, err := walconfig.Parse([]byte(name + ": {}\n"))
		require.NoError(t, err, name)
	}
}

// A backend registered by the caller decodes its section strictly too, at
// the file's lines, whatever its settings struct.
func TestCallersBackendDecodesStrictly(t *testing.T) {
	type narrow struct {
		Dir string `yaml:"dir"`
	}
	path := writeConfig(t, "backend: local\nlocal:\n  dir: ./d\n  sync: none\n")
	cfg, err := walconfig.Load(path)
	require.NoError(t, err)
	reg := walimpls.NewRegistry()
	got := map[string]any{}
	require.NoError(t, reg.Register(capture{name: local.Name, new: func() any { return &narrow{} }, got: got}))
	_, err = walconfig.Build(context.Background(), cfg, walconfig.Deps{Registry: reg})
	requireProblems(t, err, path, problem{4, "local.sync", "unknown key (known keys: dir)"})
}

// The retention section decodes strictly, with the policy of every
// channel inline and overrides by name or prefix; none is the zero policy.
func TestRetentionConfig(t *testing.T) {
	cfg, err := walconfig.Parse([]byte("backend: memory\n"))
	require.NoError(t, err)
	rc, err := cfg.RetentionConfig()
	require.NoError(t, err)
	require.True(t, rc.For("any").IsZero(), "no section: nothing capped")

	cfg, err = walconfig.Parse([]byte("retention:\n  maxAge: 168h\n  maxBytes: 1024\n  interval: 2s\n" +
		"  channels:\n    orders-*: {maxAge: 24h}\n    orders-audit: {}\n"))
	require.NoError(t, err)
	rc, err = cfg.RetentionConfig()
	require.NoError(t, err)
	require.Equal(t, retention.Policy{MaxAge: 168 * time.Hour, MaxBytes: 1024}, rc.For("pch-0"))
	require.Equal(t, retention.Policy{MaxAge: 24 * time.Hour}, rc.For("orders-1"))
	require.True(t, rc.For("orders-audit").IsZero(), "the longest pattern wins")
	require.Equal(t, 2*time.Second, rc.Interval)

	_, err = walconfig.Parse([]byte("retention:\n  maxage: 1h\n"))
	requireProblems(t, err, "", problem{2, "retention.maxage", `did you mean "maxAge"?`})
}
