package walconfig_test

import (
	"context"
	"encoding/json"
	stderrors "errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	crdb "github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// kfakeCluster starts an in-process Kafka cluster, stopped when t ends.
func kfakeCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.Ports(0)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// topics lists the topics of c.
func topics(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) []string {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	require.NoError(t, err)
	defer cl.Close()
	ts, err := kadm.NewClient(cl).ListTopics(testCtx(t))
	require.NoError(t, err)
	return ts.Names()
}

func testMessage(t *testing.T, payload string) message.Message {
	t.Helper()
	m, err := message.New([]byte(payload), nil)
	require.NoError(t, err)
	return m
}

// yamlList is a YAML flow list of addrs.
func yamlList(addrs []string) string { return "[" + strings.Join(addrs, ", ") + "]" }

// The example, with real backends: every entry is built, each is
// described by what locates its data, and the Openers a chain asks for are
// the entries'.
func TestBuildAll(t *testing.T) {
	ctx := testCtx(t)
	k1 := kfakeCluster(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "u", "hunter2"))
	k2 := kfakeCluster(t)
	dir := t.TempDir()
	path := writeConfig(t, fmt.Sprintf(`backends:
  local:                  # entry name; a registered backend name is its kind
    dir: %s
    sync: none
  memory: {}
  kafka:
    seedBrokers: %s
    retryBackoff: 10ms
    sasl: {mechanism: PLAIN, username: u, password: hunter2}
  kafka-east:             # a second entry of one kind needs kind:
    kind: kafka
    seedBrokers: %s
    topicPrefix: east-
    retryBackoff: 10ms
default: local
meta:
  store: bolt
`, dir, yamlList(k1.ListenAddrs()), yamlList(k2.ListenAddrs())))
	cfg, err := walconfig.Load(path)
	require.NoError(t, err)
	require.Equal(t, "local", cfg.Default())
	require.Equal(t, "local", cfg.Default())
	mc, err := cfg.Meta()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "meta.db"), mc.Path, "bolt lives beside the default local entry's data")

	reg := prometheus.NewRegistry()
	bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{Registerer: reg})
	require.NoError(t, err, "two entries of one kind share a registerer")
	defer func() { require.NoError(t, bs.Close()) }()
	require.Equal(t, "local", bs.Default())
	require.Equal(t, []string{"kafka", "kafka-east", "local", "memory"}, bs.Names())

	kinds := map[string]string{"local": "local", "memory": "memory", "kafka": "kafka", "kafka-east": "kafka"}
	for name, kind := range kinds {
		b, ok := bs.Entry(name)
		require.True(t, ok, name)
		require.Equal(t, name, b.Name)
		require.Equal(t, kind, b.Kind)
	}
	l, _ := bs.Entry("local")
	require.NotNil(t, l.Local)
	m, _ := bs.Entry("memory")
	require.NotNil(t, m.Memory)
	ke, _ := bs.Entry("kafka-east")
	require.NotNil(t, ke.Kafka)
	_, ok := bs.Entry("pulsar")
	require.False(t, ok)

	params := map[string]string{
		"local":      fmt.Sprintf(`{"dir":%q}`, dir),
		"memory":     "",
		"kafka":      fmt.Sprintf(`{"seedBrokers":[%q],"topicPrefix":"streamwal-"}`, k1.ListenAddrs()[0]),
		"kafka-east": fmt.Sprintf(`{"seedBrokers":[%q],"topicPrefix":"east-"}`, k2.ListenAddrs()[0]),
	}
	for name, want := range params {
		d, err := bs.Describe(name)
		require.NoError(t, err, name)
		require.Equal(t, chain.Backend{Name: name, Kind: kinds[name]}, chain.Backend{Name: d.Name, Kind: d.Kind, Channel: d.Channel}, name)
		require.Equal(t, want, string(d.Params), name)
		require.NotContains(t, string(d.Params), "hunter2")
		d.Channel = "orders-s1"
		require.NoError(t, d.Validate(), "what Describe gives is a valid chain.Backend once the channel is set")

		o, err := bs.Opener(d)
		require.NoError(t, err, name)
		b, _ := bs.Entry(name)
		require.Same(t, b, o)
	}

	// The entries work: a channel on the kafka-east entry is on its
	// cluster, with its topic prefix.
	w, err := ke.Open(ctx, walimpls.Channel{Name: "orders", Term: 1})
	require.NoError(t, err)
	_, err = walimpls.Append(ctx, w, testMessage(t, "x"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	k1Topics := topics(t, k1, kgo.SASL(plain.Auth{User: "u", Pass: "hunter2"}.AsMechanism()))
	k2Topics := topics(t, k2)
	require.Contains(t, k2Topics, "east-orders")
	require.NotContains(t, k1Topics, "east-orders")

	// Each entry's series carry its name.
	families, err := reg.Gather()
	require.NoError(t, err)
	backends := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "backend" {
					backends[l.GetValue()] = true
				}
			}
		}
	}
	require.Equal(t, map[string]bool{"kafka": true, "kafka-east": true, "local": true}, backends)

	_, err = bs.Describe("kafka-west")
	require.ErrorIs(t, err, walconfig.ErrUnknownEntry)
	require.Contains(t, err.Error(), `"kafka-west" (did you mean "kafka-east"?; entries: kafka, kafka-east, local, memory)`)
}

// A chain's backend that the configuration contradicts is refused, naming
// what each says; one it agrees with is served, however its JSON is
// written.
func TestOpenerMismatch(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	path := writeConfig(t, "backends:\n  local:\n    dir: "+dir+"\n  mem:\n    kind: memory\ndefault: mem\n")
	cfg, err := walconfig.Load(path)
	require.NoError(t, err)
	bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{})
	require.NoError(t, err)
	defer func() { require.NoError(t, bs.Close()) }()
	require.Equal(t, "mem", bs.Default())

	for _, c := range []struct {
		name string
		b    chain.Backend
		want string // "" when it is served
	}{
		{"recorded as described", chain.Backend{Name: "local", Kind: "local", Params: json.RawMessage(fmt.Sprintf(`{"dir":%q}`, dir))}, ""},
		{"the same JSON, spaced", chain.Backend{Name: "local", Kind: "local", Params: json.RawMessage(fmt.Sprintf(`{ "dir" : %q }`, dir))}, ""},
		{"memory without params", chain.Backend{Name: "mem", Kind: "memory"}, ""},
		{"memory with empty params", chain.Backend{Name: "mem", Kind: "memory", Params: json.RawMessage(`{}`)}, ""},
		{"another directory", chain.Backend{Name: "local", Kind: "local", Params: json.RawMessage(`{"dir":"/srv/wal"}`)},
			`the chain recorded kind local, params {"dir":"/srv/wal"}; the configuration's entry (` + path + `:2) says kind local, params {"dir":"` + dir + `"}`},
		{"another kind", chain.Backend{Name: "mem", Kind: "kafka", Params: json.RawMessage(`{"seedBrokers":["a:9092"]}`)},
			`the chain recorded kind kafka, params {"seedBrokers":["a:9092"]}; the configuration's entry (` + path + `:4) says kind memory, params {}`},
		{"no params recorded", chain.Backend{Name: "local", Kind: "local"}, "the chain recorded kind local, params {};"},
		{"params that are not an object", chain.Backend{Name: "local", Kind: "local", Params: json.RawMessage(`[1]`)}, "params [1] are not a JSON object"},
		{"a setting more", chain.Backend{Name: "mem", Kind: "memory", Params: json.RawMessage(`{"x":1}`)}, `params {"x":1}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.b.Channel = "orders-s0"
			o, err := bs.Opener(c.b)
			if c.want == "" {
				require.NoError(t, err)
				b, _ := bs.Entry(c.b.Name)
				require.Same(t, b, o)
				return
			}
			require.Nil(t, o)
			require.ErrorIs(t, err, walconfig.ErrBackendMismatch)
			require.True(t, crdb.Is(err, walconfig.ErrBackendMismatch))
			require.Contains(t, err.Error(), c.want)
			require.Contains(t, err.Error(), fmt.Sprintf("selector: backend %q (channel orders-s0)", c.b.Name))
			require.Contains(t, err.Error(), fmt.Sprintf("a node reopens a segment from what is recorded; fix the configuration entry %q", c.b.Name))
		})
	}

	// A name that is no entry: chainread's sentinel and the selector's.
	_, err = bs.Opener(chain.Backend{Name: "kafka-east", Kind: "kafka", Channel: "orders-s2"})
	require.ErrorIs(t, err, chainread.ErrNoOpener)
	require.ErrorIs(t, err, walconfig.ErrUnknownEntry)
	require.True(t, crdb.Is(err, chainread.ErrNoOpener))
	require.True(t, crdb.Is(err, walconfig.ErrUnknownEntry))
	require.False(t, stderrors.Is(err, walconfig.ErrBackendMismatch))
	require.Contains(t, err.Error(), `backend "kafka-east" (kind kafka, channel orders-s2), which the configuration does not have (entries: local, mem)`)
}

// A file without backends is one entry, named after its backend: BuildAll
// builds it and nothing else, and Build builds what it built before.
func TestBuildAllSingleBackendFile(t *testing.T) {
	ctx := testCtx(t)
	for _, c := range []struct {
		yaml, name string
	}{
		{"", "local"},
		{"backend: memory\nmemory:\n  maxMessageBytes: 1024\nlocal:\n  dir: /nonexistent/never/used\n", "memory"},
		{"local:\n  dir: %DIR%\n  sync: none\nkafka:\n  seedBrokers: [127.0.0.1:1]\n", "local"},
	} {
		dir := t.TempDir()
		text := strings.ReplaceAll(c.yaml, "%DIR%", dir)
		if text == "" {
			t.Chdir(dir) // the default directory is relative
		}
		cfg, err := walconfig.Parse([]byte(text))
		require.NoError(t, err)
		require.Equal(t, c.name, cfg.Default())
		require.Equal(t, c.name, cfg.Default())
		bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{})
		require.NoError(t, err, text)
		require.Equal(t, []string{c.name}, bs.Names())
		require.Equal(t, c.name, bs.Default())
		b, ok := bs.Entry(c.name)
		require.True(t, ok)
		require.Equal(t, c.name, b.Kind)
		d, err := bs.Describe(c.name)
		require.NoError(t, err)
		require.Equal(t, c.name, d.Name)
		if c.name == local.Name {
			want := dir
			if text == "" {
				want = filepath.Join(dir, walconfig.DefaultLocalDir)
			}
			want, err = filepath.EvalSymlinks(filepath.Dir(want))
			require.NoError(t, err)
			var p struct{ Dir string }
			require.NoError(t, json.Unmarshal(d.Params, &p))
			got, err := filepath.EvalSymlinks(filepath.Dir(p.Dir))
			require.NoError(t, err)
			require.Equal(t, want, got, "the absolute directory")
			require.True(t, filepath.IsAbs(p.Dir))
		}
		require.NoError(t, bs.Close())
		require.NoError(t, bs.Close(), "Close again")

		one, err := walconfig.Build(ctx, cfg, walconfig.Deps{})
		require.NoError(t, err)
		require.Equal(t, c.name, one.Name)
		require.Equal(t, c.name, one.Kind)
		require.NoError(t, one.Close())
	}
}

// Build builds the default entry of a file with backends, and only it.
func TestBuildBuildsTheDefaultEntry(t *testing.T) {
	cfg, err := walconfig.Parse([]byte("backends:\n  local:\n    dir: /nonexistent/never/used\n  mem:\n    kind: memory\n    maxMessageBytes: 512\ndefault: mem\n"))
	require.NoError(t, err)
	b, err := walconfig.Build(testCtx(t), cfg, walconfig.Deps{})
	require.NoError(t, err)
	require.Equal(t, "mem", b.Name)
	require.Equal(t, "memory", b.Kind)
	require.Equal(t, 512, b.Capabilities().MaxMessageBytes)
	require.NoError(t, b.Close())
}

// backend beside backends is accepted when it names the default entry.
func TestBackendBesideBackends(t *testing.T) {
	for _, text := range []string{
		"backend: mem\nbackends:\n  local: {}\n  mem: {kind: memory}\n",
		"backend: mem\nbackends:\n  local: {}\n  mem: {kind: memory}\ndefault: mem\n",
		"backend: mem\nbackends:\n  mem: {kind: memory}\n",
	} {
		cfg, err := walconfig.Parse([]byte(text))
		require.NoError(t, err, text)
		require.Equal(t, "mem", cfg.Default(), text)
	}
}

// Every refusal of backends and default, at its line, with its key path,
// all at once.
func TestBackendsConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		yaml string
		want []problem
	}{{
		name: "unknown key of an entry named after its kind",
		yaml: "backends:\n  local:\n    dri: ./d\n",
		want: []problem{{3, "backends.local.dri", `unknown key (did you mean "dir"?)`}},
	}, {
		name: "unknown key of an entry with a kind",
		yaml: "backends:\n  kafka-east:\n    kind: kafka\n    seedBroker: [a:9092]\n",
		want: []problem{{4, "backends.kafka-east.seedBroker", `unknown key (did you mean "seedBrokers"?)`}},
	}, {
		name: "an entry's keys are its kind's and kind",
		yaml: "backends:\n  memory:\n    capacity: 3\n",
		want: []problem{{3, "backends.memory.capacity", "unknown key (known keys: kind, maxMessageBytes)"}},
	}, {
		name: "unknown key two levels down",
		yaml: "backends:\n  k:\n    kind: kafka\n    tls:\n      enabeld: true\n",
		want: []problem{{5, "backends.k.tls.enabeld", `did you mean "enabled"?`}},
	}, {
		name: "wrong type in an entry",
		yaml: "backends:\n  local:\n    segmentBytes: big\n",
		want: []problem{{3, "backends.local.segmentBytes", `want an integer, got "big"`}},
	}, {
		name: "a key given twice in an entry",
		yaml: "backends:\n  local:\n    dir: ./a\n    dir: ./b\n",
		want: []problem{{4, "backends.local.dir", "duplicate key (first at line 3)"}},
	}, {
		name: "an entry given twice",
		yaml: "backends:\n  local: {dir: ./a}\n  memory: {}\n  local: {dir: ./b}\ndefault: memory\n",
		want: []problem{{4, "backends.local", "duplicate key (first at line 2)"}},
	}, {
		name: "an entry name chain cannot record, or that is not lower case",
		yaml: "backends:\n  Kafka_East:\n    kind: kafka\n  -x: {kind: memory}\n  " + strings.Repeat("a", chain.MaxNameLen+1) + ": {kind: memory}\n  ok: {kind: memory}\n",
		want: []problem{
			{2, "backends.Kafka_East", `entry name "Kafka_East": byte 'K' at 0: want 1 to 128 bytes of [a-z0-9-], beginning with a letter or a digit`},
			{4, "backends.-x", `entry name "-x": want 1 to 128 bytes`},
			{5, "backends." + strings.Repeat("a", chain.MaxNameLen+1), "want 1 to 128 bytes"},
		},
	}, {
		name: "kind of the wrong type",
		yaml: "backends:\n  x:\n    kind: [kafka]\n",
		want: []problem{{3, "backends.x.kind", "want a backend's name, got a list"}},
	}, {
		name: "an entry that is not a mapping",
		yaml: "backends:\n  local: ./d\n",
		want: []problem{{2, "backends.local", `want a mapping of keys to values, got "./d"`}},
	}, {
		name: "backends that is not a mapping",
		yaml: "backends: [local]\n",
		want: []problem{{1, "backends", "want a mapping of keys to values, got a list"}},
	}, {
		name: "no entries",
		yaml: "backends: {}\n",
		want: []problem{{1, "backends", "no entries: name at least one backend, or remove backends"}},
	}, {
		name: "null backends",
		yaml: "meta: {store: bolt}\nbackends:\n",
		want: []problem{{2, "backends", "no entries"}},
	}, {
		name: "a merge key between entries",
		yaml: "backends:\n  <<: {local: {}}\n",
		want: []problem{{2, "backends.<<", "merge keys are not supported between entries"}},
	}, {
		name: "default naming no entry",
		yaml: "backends:\n  local: {}\n  memory: {}\ndefault: lcoal\n",
		want: []problem{{4, "default", `"lcoal" is no entry of backends (did you mean "local"?; entries: local, memory)`}},
	}, {
		name: "default naming no entry, no near miss",
		yaml: "backends:\n  local: {}\ndefault: kafka\n",
		want: []problem{{3, "default", `"kafka" is no entry of backends (entries: local)`}},
	}, {
		name: "several entries and no default",
		yaml: "# node\nbackends:\n  local: {}\n  memory: {}\n",
		want: []problem{{2, "backends", "2 entries and no default: name the one channels without a chain begin on, such as default: local"}},
	}, {
		name: "default without backends",
		yaml: "backend: memory\ndefault: memory\n",
		want: []problem{{2, "default", "there is none: name the backend in backend: instead"}},
	}, {
		name: "backend naming no entry",
		yaml: "backend: kafka\nbackends:\n  local: {}\n",
		want: []problem{{1, "backend", `"kafka" is no entry of backends (entries: local): beside backends, name the default entry in default: and remove backend:`}},
	}, {
		name: "backend disagreeing with default",
		yaml: "backend: memory\nbackends:\n  local: {}\n  memory: {}\ndefault: local\n",
		want: []problem{{1, "backend", `"memory" disagrees with default "local": beside backends, name the default entry in default: and remove backend:`}},
	}, {
		name: "a backend section beside backends",
		yaml: "backends:\n  memory: {}\nlocal:\n  dir: ./d\n",
		want: []problem{{3, "local", "a backend's settings go in its entry of backends: move them to backends.local"}},
	}, {
		name: "every problem at once, in file order",
		yaml: "bakend: memory\nbackends:\n  local:\n    dri: ./d\n  Mem: {kind: memory}\n  kafka:\n    seedBrokers: a:9092\ndefault: mem\npool:\n  sise: 3\n",
		want: []problem{
			{1, "bakend", `did you mean "backend"?`},
			{4, "backends.local.dri", `did you mean "dir"?`},
			{5, "backends.Mem", "entry name"},
			{7, "backends.kafka.seedBrokers", `want a list, got "a:9092"`},
			{8, "default", `"mem" is no entry of backends`},
			{10, "pool.sise", `did you mean "size"?`},
		},
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

// What only the build knows (the registry, the values a backend refuses,
// two entries on one place) is refused by BuildAll at the entry's line.
func TestBuildAllErrors(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		yaml string
		is   error
		want string
	}{{
		name: "an entry that is no backend and has no kind",
		yaml: "backends:\n  local: {dir: %DIR%}\n  kafka-east:\n    seedBrokers: [a:9092]\ndefault: local\n",
		is:   walimpls.ErrUnknownBackend,
		want: `selector: %FILE%:3: backends.kafka-east: no kind, and "kafka-east" is no registered backend: add kind: (registered: kafka, local, memory, pulsar, s3)`,
	}, {
		name: "a kind that is no backend",
		yaml: "backends:\n  k:\n    kind: kafak\n",
		is:   walimpls.ErrUnknownBackend,
		want: `selector: %FILE%:3: backends.k.kind: backend "kafak": did you mean "kafka"? (registered: kafka, local, memory, pulsar, s3)`,
	}, {
		name: "a value the backend refuses",
		yaml: "backends:\n  a: {kind: memory}\n  b:\n    kind: local\n    dir: %DIR%/b\n    sync: sometimes\ndefault: a\n",
		is:   walimpls.ErrInvalidConfig,
		want: `selector: %FILE%:6: backends.b.sync: local: sync "sometimes" is not one of always, interval, none`,
	}, {
		name: "a refusal of an entry without settings",
		yaml: "backends:\n  kafka:\n",
		is:   walimpls.ErrInvalidConfig,
		want: `selector: %FILE%:2: backends.kafka: kafka: no seed brokers`,
	}, {
		name: "two entries on one directory",
		yaml: "backends:\n  a:\n    kind: local\n    dir: %DIR%\n  b: {kind: local, dir: %DIR%/.}\ndefault: a\n",
		is:   walimpls.ErrInvalidConfig,
		want: `selector: %FILE%:5: backends.b: locates the same data as entry "a" (kind local, params {"dir":"%DIR%"}): give each place one entry`,
	}, {
		name: "two entries on one kafka cluster",
		yaml: "backends:\n  a: {kind: kafka, seedBrokers: [x:1, y:2]}\n  b: {kind: kafka, seedBrokers: [y:2, x:1, x:1]}\ndefault: a\n",
		is:   walimpls.ErrInvalidConfig,
		want: `selector: %FILE%:3: backends.b: locates the same data as entry "a"`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, strings.ReplaceAll(c.yaml, "%DIR%", dir))
			cfg, err := walconfig.Load(path)
			require.NoError(t, err)
			bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{})
			require.Nil(t, bs)
			require.ErrorIs(t, err, c.is)
			want := strings.NewReplacer("%FILE%", path, "%DIR%", dir).Replace(c.want)
			require.Contains(t, err.Error(), want)
		})
	}
}

// tracker is a backend whose Openers record that they were closed; an
// entry with fail: true fails to build.
type tracker struct {
	mu     *sync.Mutex
	built  *[]string
	closed *[]string
}

func (tracker) Name() string { return "tracker" }

func (tr tracker) Build(ctx context.Context, p walimpls.BuildParams) (walimpls.Opener, error) {
	var cfg struct {
		ID   string `yaml:"id"`
		Fail bool   `yaml:"fail"`
	}
	if err := p.Config(&cfg); err != nil {
		return nil, err
	}
	if cfg.Fail {
		return nil, stderrors.New("tracker: cannot reach " + cfg.ID)
	}
	o, err := memory.New(ctx, memory.Config{})
	if err != nil {
		return nil, err
	}
	tr.mu.Lock()
	*tr.built = append(*tr.built, cfg.ID)
	tr.mu.Unlock()
	return trackedOpener{Opener: o, id: cfg.ID, tr: tr}, nil
}

type trackedOpener struct {
	walimpls.Opener
	id string
	tr tracker
}

func (o trackedOpener) Close() error {
	o.tr.mu.Lock()
	*o.tr.closed = append(*o.tr.closed, o.id)
	o.tr.mu.Unlock()
	return o.Opener.Close()
}

// When an entry fails to build, the entries built before it are closed;
// a backend of the caller's Registry is checked against the type it
// decodes into, plus kind.
func TestBuildAllClosesOnFailure(t *testing.T) {
	ctx := testCtx(t)
	var mu sync.Mutex
	var built, closed []string
	reg, err := walconfig.Registry(nil)
	require.NoError(t, err)
	require.NoError(t, reg.Register(tracker{mu: &mu, built: &built, closed: &closed}))
	dir := t.TempDir()

	path := writeConfig(t, "backends:\n  a: {kind: tracker, id: a}\n  b: {kind: tracker, id: b}\n  c: {kind: tracker, id: c, fail: true}\n  d: {kind: tracker, id: d}\n  local: {dir: "+dir+"}\ndefault: a\n")
	cfg, err := walconfig.Load(path)
	require.NoError(t, err, "the kind is not compiled in: its keys are checked when it is built")
	bs, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{Registry: reg})
	require.Nil(t, bs)
	require.ErrorContains(t, err, "selector: "+path+":4: backends.c: build: tracker: cannot reach c")
	require.Equal(t, []string{"a", "b"}, built, "in the order of their names, up to the failure")
	require.Equal(t, []string{"b", "a"}, closed, "what was built is closed, the last first")

	// The local directory was never opened (it comes after c), and is
	// free.
	s, err := local.New(ctx, local.Config{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	// Unknown keys of a caller's backend, at their line.
	path = writeConfig(t, "backends:\n  a:\n    kind: tracker\n    ids: a\n")
	cfg, err = walconfig.Load(path)
	require.NoError(t, err)
	_, err = walconfig.BuildAll(ctx, cfg, walconfig.Deps{Registry: reg})
	requireProblems(t, err, path, problem{4, "backends.a.ids", `unknown key (did you mean "id"?)`})

	// A local entry after a built one that fails: the built one is closed
	// and its directory free again.
	built, closed = nil, nil
	path = writeConfig(t, "backends:\n  a: {kind: local, dir: "+dir+"}\n  b: {kind: tracker, id: b, fail: true}\ndefault: a\n")
	cfg, err = walconfig.Load(path)
	require.NoError(t, err)
	_, err = walconfig.BuildAll(ctx, cfg, walconfig.Deps{Registry: reg})
	require.ErrorContains(t, err, "cannot reach b")
	s, err = local.New(ctx, local.Config{Dir: dir})
	require.NoError(t, err, "the local store of entry a was closed")
	require.NoError(t, s.Close())
}

// A pulsar entry with maxMessageBytes set is built without a broker; its
// Params hold where its topics are, never its credentials.
func TestPulsarEntryParams(t *testing.T) {
	cfg, err := walconfig.Parse([]byte(`backends:
  pulsar-a:
    kind: pulsar
    serviceUrl: pulsar://alice:s3cret@127.0.0.1:1
    tenant: t1
    authToken: tok-secret
    maxMessageBytes: 1048576
    operationTimeout: 1s
  pulsar-b:
    kind: pulsar
    serviceUrl: pulsar+ssl://127.0.0.1:2
    namespace: ns
    topicPrefix: wal-
    maxMessageBytes: 1048576
default: pulsar-a
`))
	require.NoError(t, err)
	bs, err := walconfig.BuildAll(testCtx(t), cfg, walconfig.Deps{})
	require.NoError(t, err)
	defer func() { require.NoError(t, bs.Close()) }()
	a, err := bs.Describe("pulsar-a")
	require.NoError(t, err)
	require.Equal(t, `{"serviceUrl":"pulsar://127.0.0.1:1","tenant":"t1","namespace":"default","topicPrefix":"streamwal-"}`, string(a.Params))
	b, err := bs.Describe("pulsar-b")
	require.NoError(t, err)
	require.Equal(t, `{"serviceUrl":"pulsar+ssl://127.0.0.1:2","tenant":"public","namespace":"ns","topicPrefix":"wal-"}`, string(b.Params))
	e, _ := bs.Entry("pulsar-a")
	require.NotNil(t, e.Pulsar)
}

// Every compiled-in backend is a kind an entry may name, whose keys Parse
// checks; the longest entry name is one a chain records.
func TestEveryBackendIsAKind(t *testing.T) {
	reg, err := walconfig.Registry(nil)
	require.NoError(t, err)
	for _, kind := range reg.Names() {
		_, err := walconfig.Parse([]byte("backends:\n  x:\n    kind: " + kind + "\n"))
		require.NoError(t, err, kind)
		_, err = walconfig.Parse([]byte("backends:\n  x:\n    kind: " + kind + "\n    nosuchkey: 1\n"))
		requireProblems(t, err, "", problem{4, "backends.x.nosuchkey", "unknown key"})
	}
	long := strings.Repeat("a", chain.MaxNameLen)
	cfg, err := walconfig.Parse([]byte("backends:\n  " + long + ": {kind: memory}\n  0-x: {kind: memory}\ndefault: 0-x\n"))
	require.NoError(t, err)
	bs, err := walconfig.BuildAll(testCtx(t), cfg, walconfig.Deps{})
	require.NoError(t, err)
	defer func() { require.NoError(t, bs.Close()) }()
	for _, name := range bs.Names() {
		d, err := bs.Describe(name)
		require.NoError(t, err)
		d.Channel = "c"
		require.NoError(t, d.Validate(), name)
	}
}

// With backends, bolt keeps meta.db beside the default entry's data when
// it is local, else beside the entry named local's.
func TestMetaPathWithBackends(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"backends:\n  a: {kind: local, dir: /a}\n  local: {dir: /l}\ndefault: a\n", "/a/meta.db"},
		{"backends:\n  a: {kind: memory}\n  local: {dir: /l}\ndefault: a\n", "/l/meta.db"},
		{"backends:\n  a: {kind: memory}\n  local: {kind: memory}\n  b: {kind: local, dir: /b}\ndefault: a\n", filepath.Join(walconfig.DefaultLocalDir, "meta.db")},
		{"backends:\n  local: {}\n", filepath.Join(walconfig.DefaultLocalDir, "meta.db")},
		{"backends:\n  local:\n", filepath.Join(walconfig.DefaultLocalDir, "meta.db")},
	} {
		cfg, err := walconfig.Parse([]byte(c.yaml))
		require.NoError(t, err, c.yaml)
		mc, err := cfg.Meta()
		require.NoError(t, err)
		require.Equal(t, c.want, mc.Path, c.yaml)
	}
}

// The package documentation's and the README's example of backends.
func TestBackendsDocExample(t *testing.T) {
	cfg, err := walconfig.Parse([]byte(`backends:
  local:                # entry name; when it is a registered backend, it is the kind
    dir: ./streamwal-data
  kafka:
    seedBrokers: [127.0.0.1:9092]
  kafka-east:           # a second entry of one kind names it in kind:
    kind: kafka
    seedBrokers: [10.0.0.1:9092]
default: local          # where channels without a chain begin
`))
	require.NoError(t, err)
	require.Equal(t, "local", cfg.Default())
}
