package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/streamwal/streamwal/walimpls"
)

// Defaults of Config; each applies when its field is left at the zero value.
const (
	DefaultClientID              = "streamwal"
	DefaultTopicPrefix           = "streamwal-"
	DefaultTransactionalIDPrefix = "streamwal-"
	DefaultPartitions            = 2
	DefaultCreateTimeout         = 30 * time.Second
	DefaultDialTimeout           = 10 * time.Second
	DefaultRequestTimeout        = 10 * time.Second
	DefaultDeliveryTimeout       = 30 * time.Second
	DefaultTransactionTimeout    = 10 * time.Second
	DefaultReadAheadBytes        = 4 << 20
	DefaultMaxBatchBytes         = 1 << 20
	DefaultMaxBatchRecords       = 4096
)

// maxTopicNameLen is Kafka's limit on topic names.
const maxTopicNameLen = 249

// SASL mechanisms understood by Config.SASL.Mechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Config configures the Kafka backend. It is a plain struct: every field's
// zero value takes the documented default, and Validate reports what cannot
// work with an error wrapping walimpls.ErrInvalidConfig.
type Config struct {
	// SeedBrokers are host:port addresses of brokers to bootstrap from.
	// Required.
	SeedBrokers []string `yaml:"seedBrokers" json:"seedBrokers"`
	// ClientID is sent to the brokers with every request. Default
	// "streamwal".
	ClientID string `yaml:"clientId" json:"clientId"`

	// TopicPrefix is prepended to a channel name to name its topic.
	// Default "streamwal-". Prefix plus channel name must be a valid Kafka
	// topic name (at most 249 bytes of [A-Za-z0-9._-]).
	TopicPrefix string `yaml:"topicPrefix" json:"topicPrefix"`
	// TransactionalIDPrefix is prepended to a channel name to form the
	// transactional.id of the channel's producer. Default "streamwal-".
	// Every node of one deployment must use the same prefix, or they do not
	// fence each other.
	TransactionalIDPrefix string `yaml:"transactionalIdPrefix" json:"transactionalIdPrefix"`

	// Partitions of a topic created by the backend. Default 2, the minimum:
	// partition 0 holds the log and partition 1 the term claims (see the
	// package documentation). More partitions are allowed and unused.
	Partitions int32 `yaml:"partitions" json:"partitions"`
	// ReplicationFactor of a created topic; 0 uses the broker default.
	ReplicationFactor int16 `yaml:"replicationFactor" json:"replicationFactor"`
	// TopicConfigs are set on created topics, over the backend's own
	// defaults (retention.ms=-1, retention.bytes=-1, cleanup.policy=delete:
	// a WAL loses data only through Truncate). cleanup.policy may not
	// include compact.
	TopicConfigs map[string]string `yaml:"topicConfigs" json:"topicConfigs"`
	// CreateTimeout bounds topic creation and the metadata wait after it,
	// Opener.Delete, and each wait of an open for a topic being deleted.
	// Default 30s.
	CreateTimeout time.Duration `yaml:"createTimeout" json:"createTimeout"`

	// DialTimeout bounds opening a connection. Default 10s.
	DialTimeout time.Duration `yaml:"dialTimeout" json:"dialTimeout"`
	// RequestTimeout is added to the broker-side timeout of every request
	// to bound waiting for its response. Default 10s.
	RequestTimeout time.Duration `yaml:"requestTimeout" json:"requestTimeout"`
	// DeliveryTimeout bounds how long one append batch may be retried before
	// its appends fail with a retryable error. Default 30s.
	DeliveryTimeout time.Duration `yaml:"deliveryTimeout" json:"deliveryTimeout"`
	// TransactionTimeout is the transaction.timeout.ms of the channel
	// producers. A writer that dies inside a transaction stalls read_committed
	// readers until the next owner opens the channel or this timeout aborts
	// the transaction. Default 10s.
	TransactionTimeout time.Duration `yaml:"transactionTimeout" json:"transactionTimeout"`
	// MetadataMinAge is the minimum time between metadata refreshes of a
	// client; 0 keeps franz-go's default (5s). Lower it to recover faster
	// after a leader change.
	MetadataMinAge time.Duration `yaml:"metadataMinAge" json:"metadataMinAge"`
	// RetryBackoff is the backoff between request retries; 0 keeps
	// franz-go's default (jittered exponential from 250ms).
	RetryBackoff time.Duration `yaml:"retryBackoff" json:"retryBackoff"`

	// DisableTransactions turns the transactional producer off: appends use
	// a plain idempotent producer, which is cheaper but cannot be fenced, so
	// the backend declares Capabilities.Fencing false and accepts a
	// ReadWrite open at any term (see the package documentation, "Without
	// transactions"). Every node must use the same value. Transactions are on
	// by default (the zero value), so that a Config literal never loses
	// fencing by omission.
	DisableTransactions bool `yaml:"disableTransactions" json:"disableTransactions"`

	// MaxMessageBytes caps the size of one record batch on the wire; 0 learns
	// it from the broker (message.max.bytes, or the topic's
	// max.message.bytes when TopicConfigs sets it) when the backend is built,
	// and from each topic's max.message.bytes when it is opened. The limit
	// declared in Capabilities is this minus the record framing overhead.
	MaxMessageBytes int `yaml:"maxMessageBytes" json:"maxMessageBytes"`
	// MaxBatchBytes bounds the bytes of appends coalesced into one
	// transaction. Default 1 MiB.
	MaxBatchBytes int `yaml:"maxBatchBytes" json:"maxBatchBytes"`
	// MaxBatchRecords bounds the appends coalesced into one transaction.
	// Default 4096.
	MaxBatchRecords int `yaml:"maxBatchRecords" json:"maxBatchRecords"`
	// ReadAheadBytes is the default read-ahead of a scanner (the fetch size
	// of its consumer) when ReadOption.ReadAheadBytes is 0. Default 4 MiB.
	ReadAheadBytes int `yaml:"readAheadBytes" json:"readAheadBytes"`

	// TLS enables TLS with settings from files; ignored when TLSConfig is
	// set.
	TLS TLSFiles `yaml:"tls" json:"tls"`
	// TLSConfig enables TLS with a ready configuration (code only).
	TLSConfig *tls.Config `yaml:"-" json:"-"`
	// SASL authenticates every connection when Mechanism is set.
	SASL SASL `yaml:"sasl" json:"sasl"`

	// ClientOptions are appended to the options of every franz-go client
	// the backend creates (code only; for tests and tuning). They must not
	// change what the backend relies on: transactional ids, isolation
	// level, reset policy or the consumed partitions.
	ClientOptions []kgo.Opt `yaml:"-" json:"-"`
}

// TLSFiles configures TLS from PEM files.
type TLSFiles struct {
	// Enabled turns TLS on; with no files set the system roots verify the
	// brokers.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// CAFile holds the certificates that verify the brokers.
	CAFile string `yaml:"caFile" json:"caFile"`
	// CertFile and KeyFile hold a client certificate, for mutual TLS; both
	// or neither.
	CertFile string `yaml:"certFile" json:"certFile"`
	KeyFile  string `yaml:"keyFile" json:"keyFile"`
	// ServerName overrides the name verified in the broker certificates.
	ServerName string `yaml:"serverName" json:"serverName"`
	// InsecureSkipVerify disables verification of the brokers (tests only).
	InsecureSkipVerify bool `yaml:"insecureSkipVerify" json:"insecureSkipVerify"`
}

// SASL configures SASL authentication.
type SASL struct {
	// Mechanism is "" (no SASL), "PLAIN", "SCRAM-SHA-256" or
	// "SCRAM-SHA-512".
	Mechanism string `yaml:"mechanism" json:"mechanism"`
	Username  string `yaml:"username" json:"username"`
	Password  string `yaml:"password" json:"password"`
}

// withDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) withDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = DefaultTopicPrefix
	}
	if c.TransactionalIDPrefix == "" {
		c.TransactionalIDPrefix = DefaultTransactionalIDPrefix
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.CreateTimeout == 0 {
		c.CreateTimeout = DefaultCreateTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if c.ReadAheadBytes == 0 {
		c.ReadAheadBytes = DefaultReadAheadBytes
	}
	cfgs := map[string]string{
		"retention.ms":    "-1",
		"retention.bytes": "-1",
		"cleanup.policy":  "delete",
	}
	maps.Copy(cfgs, c.TopicConfigs)
	c.TopicConfigs = cfgs
	return c
}

func invalid(format string, args ...any) error {
	return errors.Wrapf(walimpls.ErrInvalidConfig, "kafka: "+format, args...)
}

// Validate reports the first problem of c, wrapping
// walimpls.ErrInvalidConfig. Zero fields take their defaults first.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.SeedBrokers) == 0 {
		return invalid("no seed brokers")
	}
	for _, b := range c.SeedBrokers {
		if strings.TrimSpace(b) == "" || strings.ContainsAny(b, " \t\n") {
			return invalid("seed broker %q is not a host:port address", b)
		}
	}
	if err := validateNamePart("topic prefix", c.TopicPrefix); err != nil {
		return err
	}
	if len(c.TopicPrefix)+walimpls.MaxChannelNameLen > maxTopicNameLen {
		return invalid("topic prefix of %d bytes leaves no room for channel names of up to %d bytes (topic names are at most %d)",
			len(c.TopicPrefix), walimpls.MaxChannelNameLen, maxTopicNameLen)
	}
	if err := validateNamePart("transactional id prefix", c.TransactionalIDPrefix); err != nil {
		return err
	}
	if c.Partitions < 2 {
		return invalid("partitions %d: at least 2 are needed (partition 1 holds term claims)", c.Partitions)
	}
	if c.ReplicationFactor < -1 {
		return invalid("replication factor %d", c.ReplicationFactor)
	}
	if p := c.TopicConfigs["cleanup.policy"]; strings.Contains(p, "compact") {
		return invalid("topic config cleanup.policy=%q: a WAL topic cannot be compacted", p)
	}
	if v, ok := c.TopicConfigs["max.message.bytes"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n <= recordOverhead {
			return invalid("topic config max.message.bytes=%q", v)
		}
	}
	for name, d := range map[string]time.Duration{
		"create timeout": c.CreateTimeout, "dial timeout": c.DialTimeout,
		"request timeout": c.RequestTimeout, "delivery timeout": c.DeliveryTimeout,
		"transaction timeout": c.TransactionTimeout, "metadata min age": c.MetadataMinAge,
		"retry backoff": c.RetryBackoff,
	} {
		if d < 0 {
			return invalid("negative %s %s", name, d)
		}
	}
	if c.TransactionTimeout < time.Second {
		return invalid("transaction timeout %s is below 1s", c.TransactionTimeout)
	}
	if c.MaxMessageBytes < 0 || (c.MaxMessageBytes > 0 && c.MaxMessageBytes <= recordOverhead) {
		return invalid("max message bytes %d must exceed the framing overhead of %d", c.MaxMessageBytes, recordOverhead)
	}
	if c.MaxBatchBytes < 0 || c.MaxBatchRecords < 0 || c.ReadAheadBytes < 0 {
		return invalid("negative batch or read-ahead size")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return invalid("tls: cert_file and key_file go together")
	}
	switch strings.ToUpper(c.SASL.Mechanism) {
	case "":
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASL.Username == "" {
			return invalid("sasl %s: empty username", c.SASL.Mechanism)
		}
	default:
		return invalid("sasl mechanism %q (want %s, %s or %s)", c.SASL.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
	return nil
}

// validateNamePart checks a prefix that becomes part of a topic name or a
// transactional id: Kafka's legal characters only.
func validateNamePart(what, s string) error {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return invalid("%s %q: byte %q at %d is not one of [A-Za-z0-9._-]", what, s, b, i)
		}
	}
	return nil
}

// topicName derives a channel's topic. The channel name is already valid
// (walimpls.ValidateChannelName); the prefix is validated with the config,
// so the result is a legal Kafka topic name.
func (c *Config) topicName(channel string) string { return c.TopicPrefix + channel }

func (c *Config) transactionalID(channel string) string { return c.TransactionalIDPrefix + channel }

// tlsConfig builds the TLS configuration, nil when TLS is off.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if c.TLSConfig != nil {
		return c.TLSConfig.Clone(), nil
	}
	f := c.TLS
	if !f.Enabled && f.CAFile == "" && f.CertFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName, InsecureSkipVerify: f.InsecureSkipVerify} //nolint:gosec // opt-in for tests
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, invalid("tls ca file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, invalid("tls ca file %q holds no PEM certificate", f.CAFile)
		}
		tc.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, invalid("tls client certificate: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (c *Config) saslMechanism() sasl.Mechanism {
	switch strings.ToUpper(c.SASL.Mechanism) {
	case SASLPlain:
		return plain.Auth{User: c.SASL.Username, Pass: c.SASL.Password}.AsMechanism()
	case SASLScramSHA256:
		return scram.Auth{User: c.SASL.Username, Pass: c.SASL.Password}.AsSha256Mechanism()
	case SASLScramSHA512:
		return scram.Auth{User: c.SASL.Username, Pass: c.SASL.Password}.AsSha512Mechanism()
	}
	return nil
}

// baseOpts are the options every client of the backend shares.
func (c *Config) baseOpts(tc *tls.Config, logger *slog.Logger) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.SeedBrokers...),
		kgo.ClientID(c.ClientID),
		kgo.DialTimeout(c.DialTimeout),
		kgo.RequestTimeoutOverhead(c.RequestTimeout),
		kgo.WithLogger(slogAdapter{l: logger}),
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := c.saslMechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if c.MetadataMinAge > 0 {
		opts = append(opts, kgo.MetadataMinAge(c.MetadataMinAge))
	}
	if c.RetryBackoff > 0 {
		d := c.RetryBackoff
		opts = append(opts, kgo.RetryBackoffFn(func(int) time.Duration { return d }))
	}
	return opts
}

// slogAdapter sends franz-go's warnings and errors to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (a slogAdapter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelError
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	case kgo.LogLevelInfo:
		lvl = slog.LevelInfo
	}
	a.l.Log(context.Background(), lvl, "franz-go: "+msg, keyvals...)
}
