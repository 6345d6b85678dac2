package walconfig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/boltstore"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/security/tlsconf"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/local"
)

// Meta stores.
const (
	MetaBolt = "bolt"
	MetaEtcd = "etcd"
)

// MetaConfig is the "meta" section: where the control data (the channel
// pool, allocations, checkpoints) lives.
//
//	meta:
//	  store: bolt                  # bolt (default, embedded) | etcd
//	  path: ./streamwal-data/meta.db   # bolt; default: meta.db in the local backend's dir
//	  endpoints: [http://127.0.0.1:2379]   # etcd
//	  prefix: /streamwal/          # etcd: namespace of every key
//	  dialTimeout: 5s              # etcd
//	  username: ""                 # etcd
//	  password: ""                 # etcd (better: passwordFile)
//	  passwordFile: ""             # etcd: a file holding the password
//	  caFile: ""                   # etcd over TLS (https endpoints): the CA bundle that verifies etcd
//	  certFile: ""                 # etcd over TLS: a client certificate etcd accepts
//	  keyFile: ""                  #   and its key
type MetaConfig struct {
	Store        string        `yaml:"store"`
	Path         string        `yaml:"path"`
	Endpoints    []string      `yaml:"endpoints"`
	Prefix       string        `yaml:"prefix"`
	DialTimeout  time.Duration `yaml:"dialTimeout"`
	Username     string        `yaml:"username"`
	Password     string        `yaml:"password"`
	PasswordFile string        `yaml:"passwordFile"`
	CAFile       string        `yaml:"caFile"`
	CertFile     string        `yaml:"certFile"`
	KeyFile      string        `yaml:"keyFile"`
}

// etcdConfig is how OpenMeta dials etcd: TLS when an endpoint is https or
// a TLS file is named, the password from passwordFile when given.
func (mc MetaConfig) etcdConfig() (etcdstore.Config, error) {
	cfg := etcdstore.Config{Endpoints: mc.Endpoints, DialTimeout: mc.DialTimeout, Username: mc.Username, Password: mc.Password}
	if mc.PasswordFile != "" {
		if mc.Password != "" {
			return cfg, errors.New("meta: password and passwordFile: give one")
		}
		b, err := os.ReadFile(mc.PasswordFile)
		if err != nil {
			return cfg, errors.Wrapf(err, "meta.passwordFile")
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
	}
	tc := tlsconf.Config{CAFile: mc.CAFile, CertFile: mc.CertFile, KeyFile: mc.KeyFile,
		Names: tlsconf.Names{CAFile: "meta.caFile", CertFile: "meta.certFile", KeyFile: "meta.keyFile"}}
	https := tc.Enabled()
	for _, ep := range mc.Endpoints {
		https = https || strings.HasPrefix(ep, "https://")
	}
	if https {
		t, _, err := tc.Client()
		if err != nil {
			return cfg, err
		}
		cfg.TLS = t
	}
	return cfg, nil
}

// Meta decodes the "meta" section, strictly, with its defaults.
func (c Config) Meta() (MetaConfig, error) {
	var mc MetaConfig
	if err := c.decoder("meta", nil)(&mc); err != nil {
		return MetaConfig{}, err
	}
	if mc.Store == "" {
		mc.Store = MetaBolt
	}
	switch mc.Store {
	case MetaBolt:
		if mc.Path == "" {
			mc.Path = filepath.Join(c.localDir(), "meta.db")
		}
	case MetaEtcd:
		if len(mc.Endpoints) == 0 {
			return MetaConfig{}, c.refused("meta", errors.New("store etcd needs endpoints"))
		}
	default:
		return MetaConfig{}, c.refused("meta", errors.Newf("store %q is not %s or %s", mc.Store, MetaBolt, MetaEtcd))
	}
	return mc, nil
}

// localDir is the local backend's directory, beside which bolt keeps
// meta.db by default: in a file without backends, the dir of the local
// section, whichever backend is chosen; with backends, the dir of the
// default entry when it is of kind local, else of the entry named local
// when it is of kind local; else (or when it says none) DefaultLocalDir.
func (c Config) localDir() string {
	e := entry{name: local.Name, path: local.Name, node: c.sections[local.Name]}
	if c.entries != nil {
		var ok bool
		if e, ok = c.entries[c.def]; !ok || e.kind != local.Name {
			if e, ok = c.entries[local.Name]; !ok || e.kind != local.Name {
				return DefaultLocalDir
			}
		}
	}
	var lc local.Config
	if err := c.entryDecoder(e, nil)(&lc); err == nil && lc.Dir != "" {
		return lc.Dir
	}
	return DefaultLocalDir
}

// OpenMeta opens the metadata store the "meta" section describes. The
// returned store owns what it opened (for etcd, its client): Close
// releases it.
func OpenMeta(ctx context.Context, c Config) (meta.Store, error) {
	mc, err := c.Meta()
	if err != nil {
		return nil, err
	}
	if mc.Store == MetaBolt {
		s, err := boltstore.Open(mc.Path, boltstore.Options{})
		if err != nil {
			return nil, errors.Wrapf(err, "selector: meta: open %s", mc.Path)
		}
		return s, nil
	}
	ecfg, err := mc.etcdConfig()
	if err != nil {
		return nil, errors.WithStack(fmt.Errorf("selector: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	cli, err := etcdstore.Dial(ctx, ecfg)
	if err != nil {
		return nil, errors.Wrap(err, "selector: meta: dial etcd")
	}
	s, err := etcdstore.New(cli, etcdstore.Options{Prefix: mc.Prefix})
	if err != nil {
		_ = cli.Close()
		return nil, errors.WithStack(fmt.Errorf("selector: meta: %w: %w", err, walimpls.ErrInvalidConfig))
	}
	return &ownedEtcd{Store: s, close: cli.Close}, nil
}

// ownedEtcd is an etcd store that closes the client it dialed.
type ownedEtcd struct {
	meta.Store
	close func() error
}

func (s *ownedEtcd) Close() error {
	err := s.Store.Close()
	if cerr := s.close(); err == nil {
		err = cerr
	}
	return err
}

// PoolConfig decodes the "pool" section, strictly; ok is false when the
// configuration has none.
//
//	pool:
//	  name: default                 # the pool's name in the store
//	  size: 16                      # pchannels; may grow, never shrink
//	  prefix: streamwal-pchannel-   # pchannel names: prefix + index
//	  strategy: round-robin         # round-robin | least-loaded | a name in pool.Options.Placers
func (c Config) PoolConfig() (cfg pool.Config, ok bool, err error) {
	if _, ok = c.sections["pool"]; !ok {
		return pool.Config{}, false, nil
	}
	if err := c.decoder("pool", nil)(&cfg); err != nil {
		return pool.Config{}, true, err
	}
	if err := cfg.Validate(); err != nil {
		// A ConfigError: it matches walimpls.ErrInvalidConfig, like every
		// configuration error of the selector, and pool.ErrInvalidConfig
		// through its cause.
		return pool.Config{}, true, c.refused("pool", err)
	}
	return cfg, true, nil
}

// RetentionConfig decodes the "retention" section, strictly (the zero
// retention.Config, which caps nothing, when there is none): a node's
// retention of its channels' logs, see retention.Config.
//
//	retention:
//	  maxAge: 168h          # what no consumer committed on: dropped after a week
//	  maxBytes: 10737418240 # or beyond 10 GiB per channel
//	  channels:
//	    orders-*: {maxAge: 24h}
func (c Config) RetentionConfig() (retention.Config, error) {
	var cfg retention.Config
	if _, ok := c.sections["retention"]; !ok {
		return cfg, nil
	}
	if err := c.decoder("retention", nil)(&cfg); err != nil {
		return retention.Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return retention.Config{}, c.refused("retention", err)
	}
	return cfg, nil
}

// OpenPool opens the pool the "pool" section describes (the defaults of
// pool.Config when there is none) in store, on the default entry (whose
// name the pool records as its backend) through opener, which creates
// missing pchannels when it can. A strategy that is neither
// built in nor in opts.Placers is refused here, at its line.
func OpenPool(ctx context.Context, c Config, store meta.Store, opener walimpls.Opener, opts pool.Options) (*pool.Pool, error) {
	return openPool(ctx, c, store, pool.Backend{Name: c.Default(), Opener: opener}, opts)
}

// OpenChainedPool is OpenPool for a node whose channels are chains
// (pool.Backend.Chained): the default entry is where new pchannels begin,
// and a pool recorded on another entry still opens.
func OpenChainedPool(ctx context.Context, c Config, store meta.Store, opener walimpls.Opener, opts pool.Options) (*pool.Pool, error) {
	return openPool(ctx, c, store, pool.Backend{Name: c.Default(), Opener: opener, Chained: true}, opts)
}

func openPool(ctx context.Context, c Config, store meta.Store, b pool.Backend, opts pool.Options) (*pool.Pool, error) {
	cfg, _, err := c.PoolConfig()
	if err != nil {
		return nil, err
	}
	p, err := pool.Open(ctx, store, b, cfg, opts)
	if errors.Is(err, pool.ErrInvalidConfig) {
		return nil, c.refused("pool", err)
	}
	if err != nil {
		return nil, errors.Wrap(err, "selector")
	}
	return p, nil
}
