package walconfig_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/security/certs"
	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls"
)

func TestMetaAndPoolSections(t *testing.T) {
	dir := t.TempDir()
	cfg, err := walconfig.Parse([]byte(fmt.Sprintf(`
backend: memory
local:
  dir: %s
pool:
  size: 4
  prefix: wal-
  strategy: least-loaded
`, dir)))
	require.NoError(t, err)
	mc, err := cfg.Meta()
	require.NoError(t, err)
	require.Equal(t, walconfig.MetaBolt, mc.Store)
	require.Equal(t, filepath.Join(dir, "meta.db"), mc.Path, "bolt lives beside the local backend's data")
	pc, ok, err := cfg.PoolConfig()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, pool.Config{Size: 4, Prefix: "wal-", Strategy: pool.LeastLoaded}, pc)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := walconfig.OpenMeta(ctx, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	o, err := walconfig.Build(ctx, cfg, walconfig.Deps{})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	p, err := walconfig.OpenPool(ctx, cfg, store, o, pool.Options{})
	require.NoError(t, err)
	defer func() { _ = p.Close() }()
	require.Equal(t, []string{"wal-0", "wal-1", "wal-2", "wal-3"}, p.PChannels())
	as, err := p.Allocate(ctx, "orders")
	require.NoError(t, err)
	wo, err := pool.DecodeWALOptions(as[0].Options)
	require.NoError(t, err)
	require.Equal(t, "memory", wo.Backend)

	// No pool section: the pool's defaults.
	plain, err := walconfig.Parse([]byte("backend: memory\n"))
	require.NoError(t, err)
	_, ok, err = plain.PoolConfig()
	require.NoError(t, err)
	require.False(t, ok)
}

func TestMetaAndPoolSectionErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"meta:\n  store: zookeeper\n", `store "zookeeper"`},
		{"meta:\n  store: etcd\n", "needs endpoints"},
		{"meta:\n  stor: bolt\n", "stor"},
		{"pool:\n  size: 0\n  sise: 3\n", "sise"},
		{"pool:\n  size: -2\n", "size -2"},
		{"pool:\n  strategy: 'round robin'\n", `strategy "round robin"`},
		{"pool:\n  prefix: 'a b'\n", "prefix"},
	} {
		// Unknown keys are refused by Parse already; values, once decoded.
		cfg, err := walconfig.Parse([]byte(c.yaml))
		if err == nil {
			_, merr := cfg.Meta()
			_, _, perr := cfg.PoolConfig()
			err = merr
			if strings.HasPrefix(c.yaml, "pool") {
				err = perr
			}
		}
		require.ErrorIsf(t, err, walimpls.ErrInvalidConfig, "%q", c.yaml)
		require.Containsf(t, err.Error(), c.want, "%q", c.yaml)
	}
}

// A strategy of the embedder's own is named in the configuration and
// supplied in pool.Options.Placers; without it the name is refused at its
// line.
func TestPoolStrategyOfYourOwn(t *testing.T) {
	path := writeConfig(t, "backend: memory\npool:\n  size: 3\n  strategy: pinned\n")
	cfg, err := walconfig.Load(path)
	require.NoError(t, err)
	pc, _, err := cfg.PoolConfig()
	require.NoError(t, err, "a name is a name: whether a Placer is supplied is known when the pool opens")
	require.Equal(t, pool.Strategy("pinned"), pc.Strategy)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "meta.db"), boltstore.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	_, err = walconfig.OpenPool(ctx, cfg, store, nil, pool.Options{})
	requireProblems(t, err, path, problem{4, "pool.strategy", `strategy "pinned"`})
	require.ErrorIs(t, err, pool.ErrInvalidConfig)

	last := pool.PlacerFunc(func(pl pool.Placement) (string, error) { return pl.PChannels[len(pl.PChannels)-1].Name, nil })
	p, err := walconfig.OpenPool(ctx, cfg, store, nil, pool.Options{Placers: map[pool.Strategy]pool.Placer{"pinned": last}})
	require.NoError(t, err)
	defer func() { _ = p.Close() }()
	as, err := p.Allocate(ctx, "a", "b")
	require.NoError(t, err)
	require.Equal(t, "streamwal-pchannel-2", as[0].PChannel)
	require.Equal(t, "streamwal-pchannel-2", as[1].PChannel)
}

func TestOpenMetaEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg, err := walconfig.Parse([]byte(fmt.Sprintf("meta:\n  store: etcd\n  endpoints: [%s]\n  prefix: /sel/\n", srv.Endpoints()[0])))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := walconfig.OpenMeta(ctx, cfg)
	require.NoError(t, err)
	_, err = s.Put(ctx, "k", []byte("v"), 0)
	require.NoError(t, err)
	kv, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v", string(kv.Value))
	require.NoError(t, s.Close(), "closes the client it dialed too")
}

// The meta section reaches an etcd that requires mutual TLS with the files
// it names; a file it cannot use is refused naming its key.
func TestOpenMetaEtcdTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA(certs.Request{})
	require.NoError(t, err)
	require.NoError(t, certs.Write(dir, certs.CACert, certs.CAKey, ca.Pair, false))
	for _, c := range []struct {
		name string
		kind certs.Kind
	}{{"etcd", certs.Node}, {"app", certs.Client}} {
		pair, err := ca.Issue(certs.Request{CommonName: c.name, Kind: c.kind, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
		require.NoError(t, err)
		require.NoError(t, certs.Write(dir, c.name+".crt", c.name+".key", pair, false))
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	srv := etcdtest.StartWith(t, etcdtest.Options{TLS: &etcdtest.TLSFiles{CertFile: f("etcd.crt"), KeyFile: f("etcd.key"), ClientCAFile: f(certs.CACert)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := walconfig.Parse([]byte(fmt.Sprintf("meta:\n  store: etcd\n  endpoints: [%s]\n  prefix: /sel/\n  caFile: %s\n  certFile: %s\n  keyFile: %s\n",
		srv.Endpoints()[0], f(certs.CACert), f("app.crt"), f("app.key"))))
	require.NoError(t, err)
	s, err := walconfig.OpenMeta(ctx, cfg)
	require.NoError(t, err)
	_, err = s.Put(ctx, "k", []byte("v"), 0)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	cfg, err = walconfig.Parse([]byte(fmt.Sprintf("meta:\n  store: etcd\n  endpoints: [%s]\n  caFile: %s\n  certFile: %s\n  keyFile: %s\n",
		srv.Endpoints()[0], f(certs.CACert), f("app.crt"), f("etcd.key"))))
	require.NoError(t, err)
	_, err = walconfig.OpenMeta(ctx, cfg)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.Contains(t, err.Error(), "meta.keyFile "+f("etcd.key")+": not the key of the certificate meta.certFile "+f("app.crt"))
}
