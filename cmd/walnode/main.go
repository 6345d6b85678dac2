// Command walnode runs a streamwal node: it hosts the channels a cluster's
// coordinator assigns to it and serves the client API (Connect, gRPC and
// gRPC-Web on one port), with /metrics and /healthz. It also runs a
// coordinator candidate, so any node can lead the cluster.
//
// With no flags it is a one-node cluster on this machine: the local backend
// in ./walnode-data, an etcd member embedded in the same process, the API on
// 127.0.0.1:7070:
//
//	go run ./cmd/walnode
//
// Several nodes need a backend they share (Kafka or Pulsar) and one etcd.
// To try that on one machine, the first node can run an in-memory
// Kafka-protocol broker for the others (for trying only: its data lives in
// that process):
//
//	go run ./cmd/walnode -id n1 -listen 127.0.0.1:7071 -dev-kafka 127.0.0.1:9092
//	go run ./cmd/walnode -id n2 -listen 127.0.0.1:7072 -etcd http://127.0.0.1:2379 -kafka 127.0.0.1:9092
//	go run ./cmd/walnode -id n3 -listen 127.0.0.1:7073 -etcd http://127.0.0.1:2379 -kafka 127.0.0.1:9092
//
// An S3-compatible store is the other shared backend: -s3-bucket with
// -s3-endpoint (and -s3-prefix, -s3-region, -s3-path-style,
// -s3-credentials-file; the AWS chain gives credentials otherwise), or, to
// try it on one machine, -dev-s3, an in-memory store (gofakes3) in the
// first node's process with a bucket, whose credentials it writes to
// <-data>/dev-s3-credentials for the others (for trying only, like
// -dev-kafka):
//
//	go run ./cmd/walnode -id n1 -listen 127.0.0.1:7071 -dev-s3 127.0.0.1:9000
//	go run ./cmd/walnode -id n2 -listen 127.0.0.1:7072 -etcd http://127.0.0.1:2379 -data ./walnode-n2 \
//	    -s3-endpoint http://127.0.0.1:9000 -s3-bucket streamwal -s3-path-style -s3-credentials-file ./walnode-data/dev-s3-credentials
//
// Beside Kafka or S3 the local backend is configured too, and -default
// says where new channels begin (kafka or s3, the one configured, by
// default; local): walctl migrate moves channels between them.
//
// Beyond loopback it needs TLS, or it refuses to start: -tls-cert and
// -tls-key serve the API (and the embedded etcd member) over TLS,
// -tls-client-ca requires client certificates of that CA (mutual TLS);
// -etcd-ca, -etcd-cert, -etcd-key and -etcd-user reach an etcd of your own.
// -insecure serves plaintext anyway. walctl certs makes the files; the
// README's "Running a secure cluster" has the recipe.
//
// -authz <file> turns authorization on: the policy (package
// security/authz) says which principal, from a client certificate or a
// bearer token, may append to, read and administer which channels, and
// everything else is refused. SIGHUP reloads it, and so does a change of
// the file (one that does not load leaves the previous policy in force,
// and the log says why). With -authz the embedded etcd member has
// authentication on from the first start, with a user per principal
// (passwords in <-data>/etcd-auth/<user>.password; other nodes reach it as
// -etcd-user streamwal-node with that user's file), kept in step on every
// reload; an etcd of -etcd without authentication is refused unless
// -etcd-guarded-elsewhere (walctl etcd-auth turns it on).
//
// SIGHUP never stops a node: without -authz there is nothing to reload
// (certificates are read again at their next handshake, and the embedded
// member's within a second), and it says so.
//
// SIGTERM or SIGINT stops it gracefully: no new appends, those in flight
// drain, the WALs close, the lease is revoked (its channels move at once),
// bounded by -shutdown-timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainwal"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/consumers"
	"github.com/streamwal/streamwal/coordinator"
	"github.com/streamwal/streamwal/internal/s3dev"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/node"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/retention"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/walconfig"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

type params struct {
	id, listen, advertise string
	config, data          string
	authz                 string
	etcd, etcdListen      string
	devKafka, kafka       string
	devS3                 string
	s3                    s3Flags
	defaultBackend        string
	crashAfter            string
	retentionMaxAge       time.Duration
	retentionMaxBytes     int64
	root                  string
	sessionTTL            time.Duration
	shutdownTimeout       time.Duration
	coordinate            bool
	logLevel              string
	security
}

// s3Flags configure the s3 backend without a -config file.
type s3Flags struct {
	endpoint, bucket, prefix, region string
	pathStyle                        bool
	credentialsFile                  string
}

// given reports whether any of the flags is set.
func (f s3Flags) given() bool { return f != s3Flags{} }

// security are the flags of TLS and credentials.
type security struct {
	tlsCert, tlsKey, tlsClientCA, tlsCA string
	tlsClientCertOptional               bool
	insecure                            bool
	etcdCA, etcdCert, etcdKey           string
	etcdUser, etcdPasswordFile          string
	etcdGuardedElsewhere                bool
	// Per unauthenticated peer (node.Config; 0: the node's defaults).
	maxConnsPerPeer, maxStreamsPerPeer, failedHandshakesPerPeer int
}

func main() {
	p, logger, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // -h: the usage went to stderr; asking for it is no error
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "walnode:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, p, logger); err != nil {
		// The message, not %+v: slog's text handler would print every
		// frame of the error's stack.
		logger.Error("walnode failed", "error", err.Error())
		os.Exit(1)
	}
}

// parseFlags reads walnode's flags and makes its logger.
func parseFlags(args []string) (params, *slog.Logger, error) {
	var p params
	fs := flag.NewFlagSet("walnode", flag.ContinueOnError)
	fs.StringVar(&p.id, "id", "n1", "this node's ID in the cluster (keep it across restarts)")
	fs.StringVar(&p.listen, "listen", "127.0.0.1:7070", "address the API listens on")
	fs.StringVar(&p.advertise, "advertise", "", "address clients reach the API at (default: the listen address)")
	fs.StringVar(&p.config, "config", "", "YAML configuration: backend, meta and pool sections (see package walconfig)")
	fs.StringVar(&p.authz, "authz", "", "authorization policy file (YAML, see package security/authz): once given, every request it does not grant is refused")
	fs.StringVar(&p.data, "data", "./walnode-data", "data directory (the local backend's log, the embedded etcd member)")
	fs.StringVar(&p.etcd, "etcd", "", "etcd endpoints, comma-separated; empty embeds an etcd member in -data")
	fs.StringVar(&p.etcdListen, "etcd-listen", "127.0.0.1:2379", "client address of the embedded etcd member")
	fs.StringVar(&p.devKafka, "dev-kafka", "", "run an in-memory Kafka-protocol broker (kfake) on this address and use it (for trying only)")
	fs.StringVar(&p.kafka, "kafka", "", "use the Kafka backend on these seed brokers, comma-separated (a shortcut for -config)")
	fs.StringVar(&p.devS3, "dev-s3", "", "run an in-memory S3-compatible store (gofakes3) with a bucket on this address and use it; its credentials go to <-data>/dev-s3-credentials (for trying only)")
	fs.StringVar(&p.s3.endpoint, "s3-endpoint", "", "with -s3-bucket: the S3-compatible store's URL (http:// or https://; empty: AWS S3 of -s3-region)")
	fs.StringVar(&p.s3.bucket, "s3-bucket", "", "use the S3 backend on this bucket, which must exist (a shortcut for -config); with -dev-s3: the bucket it creates (default "+s3dev.DefaultBucket+")")
	fs.StringVar(&p.s3.prefix, "s3-prefix", "", "the S3 backend's key prefix in the bucket, ending with / (default "+s3.DefaultPrefix+")")
	fs.StringVar(&p.s3.region, "s3-region", "", "the S3 backend's region (default "+s3.DefaultRegion+")")
	fs.BoolVar(&p.s3.pathStyle, "s3-path-style", false, "address the bucket in the URL's path, as most stores other than AWS S3 want (-dev-s3 sets it)")
	fs.StringVar(&p.s3.credentialsFile, "s3-credentials-file", "", "the S3 backend's shared-credentials file (the format of ~/.aws/credentials, profile default; empty: the AWS chain)")
	fs.StringVar(&p.defaultBackend, "default", "", "with -kafka, -dev-kafka, -s3-bucket or -dev-s3: the backend new channels begin on, kafka, s3 or local (default: the one configured beside local; required with both kafka and s3); all are configured, so walctl migrate moves channels between them")
	fs.StringVar(&p.crashAfter, "crash-after", "", "for crash tests only: SIGKILL this process right after the named step of a migration, prune or retention round (fenced, sealed, opened, prune-deleted, floor-recorded, truncated)")
	fs.DurationVar(&p.retentionMaxAge, "retention-max-age", 0, "drop what no consumer committed on once older than this, in every channel (0: keep; the config file's retention section sets it per channel)")
	fs.Int64Var(&p.retentionMaxBytes, "retention-max-bytes", 0, "drop the oldest of what no consumer committed on beyond this many bytes per channel (0: keep)")
	fs.StringVar(&p.root, "root", cluster.DefaultRoot, "the cluster's root in etcd")
	fs.DurationVar(&p.sessionTTL, "session-ttl", 10*time.Second, "lease TTL: how long after this node stops the coordinator moves its channels")
	fs.DurationVar(&p.shutdownTimeout, "shutdown-timeout", 15*time.Second, "bound on a graceful shutdown")
	fs.BoolVar(&p.coordinate, "coordinator", true, "run a coordinator candidate in this process")
	fs.StringVar(&p.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&p.tlsCert, "tls-cert", "", "PEM certificate the API (and the embedded etcd member) serves with: TLS on (walctl certs create-node)")
	fs.StringVar(&p.tlsKey, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&p.tlsClientCA, "tls-client-ca", "", "PEM CA bundle: require client certificates of these CAs (mutual TLS)")
	fs.BoolVar(&p.tlsClientCertOptional, "tls-client-cert-optional", false, "with -tls-client-ca and -authz: let clients without a certificate connect (a bearer token authenticates them)")
	fs.StringVar(&p.tlsCA, "tls-ca", "", "PEM CA bundle that verifies the other nodes (default -tls-client-ca); without -tls-client-ca it also verifies a client certificate given (clients without one still connect), so that only a node holds the liveness stream")
	fs.BoolVar(&p.insecure, "insecure", false, "serve plaintext on a non-loopback address: anyone who reaches the port can append and read")
	fs.StringVar(&p.etcdCA, "etcd-ca", "", "PEM CA bundle that verifies etcd (default -tls-ca) when the -etcd endpoints are https")
	fs.StringVar(&p.etcdCert, "etcd-cert", "", "PEM client certificate for etcd (default -tls-cert when etcd is https)")
	fs.StringVar(&p.etcdKey, "etcd-key", "", "PEM private key of -etcd-cert")
	fs.StringVar(&p.etcdUser, "etcd-user", "", "etcd user name (its password from -etcd-password-file or $"+etcdPasswordEnv+")")
	fs.StringVar(&p.etcdPasswordFile, "etcd-password-file", "", "file holding the etcd user's password")
	fs.BoolVar(&p.etcdGuardedElsewhere, "etcd-guarded-elsewhere", false, "with -authz and -etcd: run even though etcd's authentication is off, because etcd is guarded another way (a network no one else reaches); without it such a node refuses to start")
	fs.IntVar(&p.maxConnsPerPeer, "max-conns-per-peer", 0, "connections at once from one IP address without a verified client certificate (default 256)")
	fs.IntVar(&p.maxStreamsPerPeer, "max-streams-per-peer", 0, "requests in flight from one unauthenticated IP address (default 1024)")
	fs.IntVar(&p.failedHandshakesPerPeer, "failed-handshakes-per-peer", 0, "failed TLS handshakes a second from one IP address before its connections are closed at accept (default 16; raise it behind a TCP proxy)")
	if err := fs.Parse(args); err != nil {
		return params{}, nil, err
	}
	if err := p.check(); err != nil {
		return params{}, nil, err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(p.logLevel)); err != nil {
		return params{}, nil, errors.Wrap(err, "-log-level")
	}
	return p, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), nil
}

func run(ctx context.Context, p params, logger *slog.Logger) error {
	cfg, err := backendConfig(p)
	if err != nil {
		return err
	}
	// The policy is read before anything starts: a node that cannot
	// enforce it does not serve at all.
	var (
		policy   *authz.Policy
		policyPC authz.Config
	)
	if p.authz != "" {
		pc, err := authz.Load(p.authz)
		if err != nil {
			return err
		}
		if policy, err = authz.Compile(pc); err != nil {
			return err
		}
		policyPC = pc
		logger.Info("authorization on", "policy", p.authz, "principals", len(pc.Principals), "roles", len(pc.Roles))
		if p.insecure && slices.ContainsFunc(slices.Collect(maps.Values(pc.Principals)), func(b authz.Binding) bool { return len(b.Tokens) > 0 }) {
			logger.Warn("-insecure with bearer tokens: they cross the network in plaintext, where anyone on the path can read and replay them; serve TLS (-tls-cert)")
		}
	}
	// SIGHUP is caught from the start: its default stops the process.
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	if p.devKafka != "" {
		broker, err := startDevKafka(p.devKafka)
		if err != nil {
			return err
		}
		closers = append(closers, broker.Close)
		logger.Warn("running an in-memory Kafka-protocol broker: for trying only, its data lives in this process", "addr", p.devKafka)
	}
	if p.devS3 != "" {
		st, creds, err := startDevS3(p)
		if err != nil {
			return err
		}
		closers = append(closers, func() { _ = st.Close() })
		// The address it listens on (a port 0 picked one) is the s3
		// entry's endpoint.
		p.devS3 = strings.TrimPrefix(st.Endpoint, "http://")
		if cfg, err = backendConfig(p); err != nil {
			return err
		}
		logger.Warn("running an in-memory S3-compatible store (gofakes3): for trying only, its data lives in this process",
			"endpoint", st.Endpoint, "bucket", st.Bucket, "credentials_file", creds)
	}
	sec, err := p.tlsConfigs(logger)
	if err != nil {
		return err
	}
	endpoints := splitList(p.etcd)
	var member *embedded
	if len(endpoints) == 0 {
		if member, err = startEtcd(p, sec.server, logger); err != nil {
			return err
		}
		closers = append(closers, member.Close)
		endpoints = []string{member.endpoint(p)}
		if member.serving != nil && p.etcdCA == "" && p.tlsCA == "" && p.tlsClientCA == "" {
			// No CA to verify the member with: it is this process, serving
			// the pair the node gave it.
			sec.etcd = member.serving.pinnedClient(sec.etcd)
		}
		logger.Info("embedded etcd member serving", "endpoint", endpoints[0])
		if policy != nil {
			// Before the node reaches it as its own user: at the first
			// start that user does not exist yet.
			if err := member.syncAuth(ctx, endpoints[0], sec.etcd, p.root, policyPC, logger); err != nil {
				return err
			}
		}
	}
	etcdCfg := etcdstore.Config{Endpoints: endpoints, TLS: sec.etcd}
	if member != nil {
		etcdCfg.Username, etcdCfg.Password, err = member.nodeCredentials(policy != nil)
	} else {
		etcdCfg.Username, etcdCfg.Password, err = p.etcdCredentials()
	}
	if err != nil {
		return err
	}
	cli, err := etcdstore.Dial(ctx, etcdCfg)
	if err != nil {
		return errors.Wrap(err, "walnode: etcd")
	}
	closers = append(closers, func() { _ = cli.Close() })
	if policy != nil && member == nil {
		if err := checkExternalEtcd(ctx, cli, p, logger); err != nil {
			return err
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := sec.register(reg); err != nil {
		return err
	}
	// Every configured backend is built: a channel's chain may have
	// segments on any of them (walctl migrate), and reads cross them all.
	backends, err := walconfig.BuildAll(ctx, cfg, walconfig.Deps{Logger: logger, Registerer: reg})
	if err != nil {
		return err
	}
	closers = append(closers, func() { _ = backends.Close() })
	opener, _ := backends.Entry(backends.Default())
	def, err := backends.Describe(backends.Default())
	if err != nil {
		return err
	}
	store, err := etcdstore.New(cli, etcdstore.Options{Prefix: strings.TrimSuffix(p.root, "/") + "-meta/"})
	if err != nil {
		return errors.Wrap(err, "walnode: meta store")
	}
	closers = append(closers, func() { _ = store.Close() })
	chains := chain.NewStore(store, chain.Options{CheckBackend: func(_ context.Context, b chain.Backend) error {
		_, err := backends.Opener(b) // this node can open it, and its entry agrees
		return err
	}})
	pl, err := walconfig.OpenChainedPool(ctx, cfg, store, opener, pool.Options{Logger: logger})
	if errors.Is(err, pool.ErrConfigMismatch) {
		where := fmt.Sprintf("the cluster's etcd at %s, under -root %s", strings.Join(endpoints, ","), p.root)
		if p.etcd == "" {
			where = fmt.Sprintf("the etcd member embedded in -data %s", p.data)
		}
		return errors.Wrapf(err, "the channel pool in %s was made by nodes of another configuration; "+
			"start this node with the configuration the pool was made with, or with another -data (or -root) to make a new cluster",
			where)
	}
	if err != nil {
		return err
	}
	closers = append(closers, func() { _ = pl.Close() })

	// The consumers' checkpoints live beside the chains: every node reads
	// and writes them, whoever owns a channel.
	checkpoints, err := consumers.NewStore(store, consumers.Options{})
	if err != nil {
		return err
	}
	retain, err := retentionConfig(cfg, p)
	if err != nil {
		return err
	}
	n, err := node.New(cli, opener, node.Config{ID: p.id, Listen: p.listen, Advertise: p.advertise, Root: p.root, TLS: sec.server,
		SessionTTL: p.sessionTTL, Backend: cfg.Default(), Logger: logger, Registerer: reg, Gatherer: reg, Authz: policy,
		Chains:    &chainwal.Config{Store: chains, Openers: backends, Default: def, Describe: backends.Describe, AfterStep: crashAfter[chainwal.Step](p.crashAfter, logger)},
		Consumers: checkpoints, Retention: retain, RetentionAfterStep: crashAfter[retention.Step](p.crashAfter, logger),
		Placement: pl, MaxConnsPerPeer: p.maxConnsPerPeer, MaxStreamsPerPeer: p.maxStreamsPerPeer, FailedHandshakesPerPeer: p.failedHandshakesPerPeer})
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	coordDone := make(chan error, 1)
	coordCtx, stopCoord := context.WithCancel(context.Background())
	if p.coordinate {
		co, err := coordinator.New(cli, coordinator.Config{ID: p.id, Node: p.id, Root: p.root, Logger: logger, Registerer: reg, SessionTTL: p.sessionTTL,
			TLS: sec.peers, Chains: chains, Describe: backends.Describe, Backends: backends.Names(),
			Channels: func(ctx context.Context) ([]string, error) {
				if err := pl.Refresh(ctx); err != nil {
					return nil, err
				}
				return pl.PChannels(), nil
			}})
		if err != nil {
			stopCoord()
			_ = n.Shutdown(context.Background())
			return err
		}
		go func() { coordDone <- co.Run(coordCtx) }()
	} else {
		coordDone <- nil
	}
	logger.Info("walnode ready", "id", p.id, "api", n.Addr(), "tls", sec.server != nil, "mutual_tls", p.tlsClientCA != "",
		"backend", cfg.Default(), "pchannels", len(pl.PChannels()))
	fmt.Printf("walnode %s serving on %s\n", p.id, n.Addr())

	// SIGHUP reloads what can be: the policy (a token revoked, a principal
	// added, without a restart, which would move the node's channels) and
	// the embedded member's users with it; certificates are read again at
	// their next handshake anyway. It never stops the node. A policy file
	// replaced is reloaded without a signal too.
	policyStamp := fileStamp(p.authz)
	var syncPending *authz.Config // the embedded member's users lag this policy
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	reloadNow := func(why string) {
		if p.authz == "" {
			logger.Info(why+": no -authz policy to reload; certificates are read again at their next handshake", "tls", sec.server != nil)
			return
		}
		policyStamp = fileStamp(p.authz)
		if pc, ok := reloadPolicy(p.authz, n, logger); ok && member != nil {
			syncPending = &pc
		}
	}
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
			continue
		case <-reload:
			reloadNow("SIGHUP")
		case <-tick.C:
			if p.authz != "" && fileStamp(p.authz) != policyStamp {
				reloadNow("policy file changed")
			}
		}
		if member != nil && member.serving != nil {
			if err := member.serving.refresh(); err != nil {
				logger.Error("embedded etcd: certificate not refreshed", "error", err.Error())
			}
		}
		if syncPending != nil {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := member.syncAuth(sctx, endpoints[0], sec.etcd, p.root, *syncPending, logger)
			cancel()
			if err != nil {
				logger.Error("embedded etcd: users not in step with the policy yet; retrying", "error", err.Error())
			} else {
				syncPending = nil
			}
		}
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), p.shutdownTimeout)
	defer cancel()
	err = n.Shutdown(sctx)
	stopCoord()
	if cerr := <-coordDone; cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = errors.Join(err, cerr) // both in the text: CombineErrors would print only the first
	}
	return err
}

// crashAfter is the AfterStep of -crash-after: it kills the process, as
// kill -9 would, right after step.
func crashAfter[S chainwal.Step | retention.Step](step string, logger *slog.Logger) func(S, string) {
	if step == "" {
		return nil
	}
	return func(s S, channel string) {
		if string(s) == step {
			logger.Warn("-crash-after: killing this process", "step", step, "channel", channel)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
}

// reloadPolicy reads the policy file again and gives it to the node. A
// file that does not load leaves the policy in force as it was, and says
// why: the node never serves without one.
func reloadPolicy(path string, n *node.Node, logger *slog.Logger) (authz.Config, bool) {
	pc, err := authz.Load(path)
	var policy *authz.Policy
	if err == nil {
		policy, err = authz.Compile(pc)
	}
	if err == nil {
		err = n.SetPolicy(policy)
	}
	if err != nil {
		logger.Error("policy not reloaded: the previous one stays in force", "policy", path, "error", err.Error())
		return authz.Config{}, false
	}
	logger.Info("policy reloaded", "policy", path, "principals", len(pc.Principals), "roles", len(pc.Roles))
	return pc, true
}

// stamp identifies a version of a file: a change of any part is a new
// file (or the same rewritten).
type stamp struct {
	size    int64
	modTime time.Time
	ino     uint64
}

func fileStamp(path string) stamp {
	if path == "" {
		return stamp{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	st := stamp{size: fi.Size(), modTime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}
