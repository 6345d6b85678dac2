package etcdstore

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/internal/storeerr"
	"github.com/streamwal/streamwal/security/tlsconf"
)

// Config is what Dial needs to connect a client. The zero value of each
// field but Endpoints is the default.
type Config struct {
	// Endpoints are the etcd client URLs, e.g. "http://127.0.0.1:2379" or
	// "unix:///abs/path.sock". At least one.
	Endpoints []string
	// DialTimeout bounds how long Dial waits for a connection (and for
	// authentication). Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// Username and Password authenticate the client; both or neither.
	// Never log the Password.
	Username string
	Password string
	// TLS, when set, is the client side of etcd's TLS: the CAs that verify
	// the members and, for members that require one, a client certificate
	// (e.g. a tlsconf.Config's Client()). Endpoints are then https://.
	TLS *tls.Config
	// KeepAliveTime is how often the client pings an idle connection, and
	// KeepAliveTimeout how long it waits for the answer before dropping it,
	// so that a half-open connection is noticed. Zero means
	// DefaultKeepAliveTime and DefaultKeepAliveTimeout.
	KeepAliveTime    time.Duration
	KeepAliveTimeout time.Duration
	// Logger receives the client's logs. Nil discards them.
	Logger *zap.Logger
}

// Defaults of Config.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultKeepAliveTime    = 10 * time.Second
	DefaultKeepAliveTimeout = 5 * time.Second
)

// Validate reports a Config Dial cannot use.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("etcdstore: no Endpoints")
	}
	for i, ep := range c.Endpoints {
		if ep == "" {
			return errors.Newf("etcdstore: empty endpoint %d", i)
		}
	}
	for name, d := range map[string]time.Duration{
		"DialTimeout": c.DialTimeout, "KeepAliveTime": c.KeepAliveTime, "KeepAliveTimeout": c.KeepAliveTimeout,
	} {
		if d < 0 {
			return errors.Newf("etcdstore: negative %s %s", name, d)
		}
	}
	if (c.Username == "") != (c.Password == "") {
		return errors.New("etcdstore: Username and Password go together")
	}
	for _, ep := range c.Endpoints {
		if c.TLS == nil && strings.HasPrefix(ep, "https://") {
			return errors.Newf("etcdstore: endpoint %s is https but no TLS configuration is given", ep)
		}
		if c.TLS != nil && strings.HasPrefix(ep, "http://") {
			return errors.Newf("etcdstore: endpoint %s is plain http but a TLS configuration is given (use https://)", ep)
		}
	}
	return nil
}

// clientConfig is the clientv3 configuration of c, defaults filled in.
func (c Config) clientConfig() clientv3.Config {
	or := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return clientv3.Config{
		Endpoints:            c.Endpoints,
		DialTimeout:          or(c.DialTimeout, DefaultDialTimeout),
		DialKeepAliveTime:    or(c.KeepAliveTime, DefaultKeepAliveTime),
		DialKeepAliveTimeout: or(c.KeepAliveTimeout, DefaultKeepAliveTimeout),
		Username:             c.Username,
		Password:             c.Password,
		TLS:                  c.TLS,
		Logger:               lg,
	}
}

// Dial connects a client to the cluster of cfg and waits, within ctx and
// cfg.DialTimeout, until its connection is ready: an unreachable cluster is
// meta.ErrUnavailable here rather than at the first call. The caller owns
// the client and closes it (after every Store on it).
func Dial(ctx context.Context, cfg Config) (*clientv3.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, storeerr.Mark(err, meta.ErrInvalid)
	}
	ccfg := cfg.clientConfig()
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, classify(ctx, errors.Wrapf(err, "etcdstore: dial %v", cfg.Endpoints))
	}
	dctx, cancel := context.WithTimeout(ctx, ccfg.DialTimeout)
	defer cancel()
	conn := cli.ActiveConnection()
	conn.Connect()
	for {
		st := conn.GetState()
		if st == connectivity.Ready {
			return cli, nil
		}
		if !conn.WaitForStateChange(dctx, st) {
			_ = cli.Close()
			err := errors.Wrapf(dctx.Err(), "etcdstore: dial %v: connection still %s", cfg.Endpoints, st)
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, err // the caller cancelled
			}
			if terr := tlsRefusal(ctx, cfg); terr != nil {
				// The reason gRPC keeps to itself: a certificate refused.
				err = errors.Wrapf(terr, "etcdstore: dial %v", cfg.Endpoints)
			}
			return nil, storeerr.Mark(err, meta.ErrUnavailable)
		}
	}
}

// tlsRefusal returns why a TLS connection to the first endpoint that
// refuses one fails (a certificate refused by either side), or nil.
func tlsRefusal(ctx context.Context, cfg Config) error {
	if cfg.TLS == nil {
		return nil
	}
	for _, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		// Not bounded by ctx: the dial used it up; by a second instead.
		if err := tlsconf.Probe(context.WithoutCancel(ctx), u.Host, cfg.TLS, time.Second); err != nil {
			var verify *tls.CertificateVerificationError
			var op *net.OpError
			if errors.As(err, &verify) || (errors.As(err, &op) && op.Op == "remote error") {
				return err
			}
		}
	}
	return nil
}
