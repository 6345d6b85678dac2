package pulsar

import (
	"context"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Defaults of Config; each applies when its field is left at the zero value.
const (
	DefaultTenant            = "public"
	DefaultNamespace         = "default"
	DefaultTopicPrefix       = "streamwal-"
	DefaultSubscription      = "streamwal-truncate"
	DefaultOperationTimeout  = 30 * time.Second
	DefaultConnectionTimeout = 10 * time.Second
	DefaultSendTimeout       = 30 * time.Second
	DefaultTakeOverTimeout   = 30 * time.Second
	DefaultTakeOverGrace     = time.Second
	DefaultReadAheadBytes    = 4 << 20
	DefaultMaxBatchMessages  = 1000
)

// metaSuffix names a channel's meta topic: "=" is not a legal byte of a
// channel name or a topic prefix, so no channel topic can collide with it.
const metaSuffix = "=meta"

// Config configures the Pulsar backend. It is a plain struct: every field's
// zero value takes the documented default, and Validate reports what cannot
// work with an error wrapping walimpls.ErrInvalidConfig.
type Config struct {
	// ServiceURL is the broker service URL, "pulsar://host:6650" or
	// "pulsar+ssl://host:6651". Required.
	ServiceURL string `yaml:"serviceUrl" json:"serviceUrl"`
	// Tenant and Namespace hold the channel topics. Default
	// "public"/"default". The namespace should keep unacknowledged messages
	// for ever (no time or size retention that deletes a backlog, no
	// backlog quota that evicts it): the backend relies on its durable
	// subscription to keep what was not truncated.
	Tenant    string `yaml:"tenant" json:"tenant"`
	Namespace string `yaml:"namespace" json:"namespace"`
	// TopicPrefix is prepended to a channel name to name its topic.
	// Default "streamwal-". Bytes of [A-Za-z0-9._-] only.
	TopicPrefix string `yaml:"topicPrefix" json:"topicPrefix"`
	// Subscription names the durable subscription whose cursor Truncate
	// moves. Default "streamwal-truncate". Every node must use the same.
	Subscription string `yaml:"subscription" json:"subscription"`

	// OperationTimeout bounds the client's requests (lookups, producer and
	// reader creation). Default 30s.
	OperationTimeout time.Duration `yaml:"operationTimeout" json:"operationTimeout"`
	// ConnectionTimeout bounds establishing a connection. Default 10s.
	ConnectionTimeout time.Duration `yaml:"connectionTimeout" json:"connectionTimeout"`
	// SendTimeout fails an append the broker has not acknowledged within
	// it, with a retryable error. Default 30s; negative disables it (an
	// append then waits for its context).
	SendTimeout time.Duration `yaml:"sendTimeout" json:"sendTimeout"`
	// TakeOverTimeout bounds how long a ReadWrite open waits for exclusive
	// access to the channel's topic (see the package documentation).
	// Default 30s.
	TakeOverTimeout time.Duration `yaml:"takeOverTimeout" json:"takeOverTimeout"`
	// TakeOverGrace is how long a ReadWrite open waits for the current
	// owner to release the topic by itself (its meta watcher sees the
	// higher claim) before it calls TakeOver. Default 1s.
	TakeOverGrace time.Duration `yaml:"takeOverGrace" json:"takeOverGrace"`
	// TakeOver is called while a ReadWrite open waits for exclusive access
	// to topic (the fully qualified name), first after TakeOverGrace and
	// again with a growing backoff (up to 2s) until access is granted. It
	// must disconnect the current producers of topic: in production, the
	// admin API's topic unload (PUT /admin/v2/persistent/{tenant}/
	// {namespace}/{topic}/unload), which AdminURL provides. Nil, without
	// AdminURL, means "wait for the owner to leave". Code only.
	TakeOver func(ctx context.Context, topic string) error `yaml:"-" json:"-"`
	// DeleteTopic deletes topic (the fully qualified name) with its
	// messages and subscriptions, disconnecting the clients that use it:
	// in production the admin API's forced delete (DELETE
	// /admin/v2/persistent/{tenant}/{namespace}/{topic}?force=true), which
	// AdminURL provides. A topic that does not exist is deleted: return
	// nil. Opener.Delete needs it; without it and without AdminURL, Delete
	// fails with an error matching walimpls.ErrInvalidConfig. Code only.
	DeleteTopic func(ctx context.Context, topic string) error `yaml:"-" json:"-"`
	// TopicExists reports whether topic exists, without creating it: in
	// production a GET of the admin API's topic stats (404: it does not),
	// which AdminURL provides. Opener.Delete asks it first, so that
	// deleting a channel that has no topics touches nothing. Without it,
	// Delete goes through the channel's topics anyway (see the package
	// documentation, "Deleting a channel"), which makes a broker that
	// creates topics on use create them for a moment. Code only.
	TopicExists func(ctx context.Context, topic string) (bool, error) `yaml:"-" json:"-"`
	// AdminURL is the cluster's admin REST API (the web service URL,
	// "http://host:8080" or "https://host:8443"). When set, TakeOver,
	// DeleteTopic and TopicExists default to its topic unload, forced
	// delete and stats calls (hooks set in code take precedence), with
	// AuthToken as bearer token and the TLS settings for https. Pulsar
	// allows unload and delete to tenant admins only: the token's role
	// must administer Tenant, besides producing to and consuming from
	// Namespace. Empty: no admin calls.
	AdminURL string `yaml:"adminUrl" json:"adminUrl"`

	// MaxMessageBytes is the broker's maximum message size; 0 learns it
	// from the broker (the max_message_size of its CONNECTED answer) when
	// the backend is built. Capabilities.MaxMessageBytes is this minus
	// the framing overhead.
	MaxMessageBytes int `yaml:"maxMessageBytes" json:"maxMessageBytes"`
	// MaxBatchMessages bounds the appends the writer hands to the producer
	// at once; it is also the producer's BatchingMaxMessages and
	// MaxPendingMessages. Default 1000.
	MaxBatchMessages int `yaml:"maxBatchMessages" json:"maxBatchMessages"`
	// ReadAheadBytes is the default read-ahead of a scanner when
	// ReadOption.ReadAheadBytes is 0: its receiver queue holds
	// ReadAheadBytes/4 KiB messages, between 10 and 1000. Default 4 MiB.
	ReadAheadBytes int `yaml:"readAheadBytes" json:"readAheadBytes"`

	// AuthToken authenticates every connection with a token (JWT), and
	// the admin calls of AdminURL as a bearer token.
	AuthToken string `yaml:"authToken" json:"authToken"`
	// TLS configures pulsar+ssl:// connections and https admin calls.
	TLS TLS `yaml:"tls" json:"tls"`
}

// TLS configures TLS connections to the brokers.
type TLS struct {
	// TrustCertsFile holds the PEM certificates that verify the brokers;
	// empty uses the system roots.
	TrustCertsFile string `yaml:"trustCertsFile" json:"trustCertsFile"`
	// AllowInsecureConnection accepts any broker certificate (tests only).
	AllowInsecureConnection bool `yaml:"allowInsecureConnection" json:"allowInsecureConnection"`
	// ValidateHostname checks the broker's host name against its
	// certificate.
	ValidateHostname bool `yaml:"validateHostname" json:"validateHostname"`
}

// withDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) withDefaults() Config {
	if c.Tenant == "" {
		c.Tenant = DefaultTenant
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = DefaultTopicPrefix
	}
	if c.Subscription == "" {
		c.Subscription = DefaultSubscription
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.ConnectionTimeout == 0 {
		c.ConnectionTimeout = DefaultConnectionTimeout
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.TakeOverTimeout == 0 {
		c.TakeOverTimeout = DefaultTakeOverTimeout
	}
	if c.TakeOverGrace == 0 {
		c.TakeOverGrace = DefaultTakeOverGrace
	}
	if c.MaxBatchMessages == 0 {
		c.MaxBatchMessages = DefaultMaxBatchMessages
	}
	if c.ReadAheadBytes == 0 {
		c.ReadAheadBytes = DefaultReadAheadBytes
	}
	return c
}

func invalid(format string, args ...any) error {
	return errors.Wrapf(walimpls.ErrInvalidConfig, "pulsar: "+format, args...)
}

// Validate reports the first problem of c, wrapping
// walimpls.ErrInvalidConfig. Zero fields take their defaults first.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.ServiceURL == "" {
		return invalid("no service url")
	}
	u, err := url.Parse(c.ServiceURL)
	if err != nil {
		return invalid("service url %q: %v", c.ServiceURL, err)
	}
	if u.Scheme != "pulsar" && u.Scheme != "pulsar+ssl" {
		return invalid("service url %q: scheme %q (want pulsar or pulsar+ssl)", c.ServiceURL, u.Scheme)
	}
	if u.Host == "" {
		return invalid("service url %q has no host", c.ServiceURL)
	}
	if c.AdminURL != "" {
		a, err := url.Parse(c.AdminURL)
		switch {
		case err != nil:
			return invalid("admin url %q: %v", c.AdminURL, err)
		case a.Scheme != "http" && a.Scheme != "https":
			return invalid("admin url %q: scheme %q (want http or https)", c.AdminURL, a.Scheme)
		case a.Host == "":
			return invalid("admin url %q has no host", c.AdminURL)
		case a.RawQuery != "" || a.Fragment != "":
			return invalid("admin url %q has a query or fragment", c.AdminURL)
		}
	}
	for what, s := range map[string]string{"tenant": c.Tenant, "namespace": c.Namespace} {
		if err := validateName(what, s, "=:"); err != nil {
			return err
		}
	}
	if err := validateName("topic prefix", c.TopicPrefix, ""); err != nil {
		return err
	}
	if err := validateName("subscription", c.Subscription, ""); err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{
		"operation timeout": c.OperationTimeout, "connection timeout": c.ConnectionTimeout,
		"take-over timeout": c.TakeOverTimeout, "take-over grace": c.TakeOverGrace,
	} {
		if d < 0 {
			return invalid("negative %s %s", name, d)
		}
	}
	if c.MaxMessageBytes < 0 || (c.MaxMessageBytes > 0 && c.MaxMessageBytes <= 2*frameOverhead) {
		return invalid("max message bytes %d must exceed twice the framing overhead of %d", c.MaxMessageBytes, frameOverhead)
	}
	if c.MaxBatchMessages < 0 || c.ReadAheadBytes < 0 {
		return invalid("negative batch or read-ahead size")
	}
	if c.TLS.TrustCertsFile != "" {
		if _, err := os.Stat(c.TLS.TrustCertsFile); err != nil {
			return invalid("tls trust certs file: %v", err)
		}
	}
	return nil
}

// validateName checks a name part: [A-Za-z0-9._-] plus the bytes of extra.
func validateName(what, s, extra string) error {
	if s == "" {
		return invalid("empty %s", what)
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-' ||
			strings.IndexByte(extra, b) >= 0) {
			return invalid("%s %q: byte %q at %d is not allowed", what, s, b, i)
		}
	}
	return nil
}

// topicName derives a channel's topic. The channel name is valid
// (walimpls.ValidateChannelName) and the prefix validated with the config.
func (c *Config) topicName(channel string) string {
	return "persistent://" + c.Tenant + "/" + c.Namespace + "/" + c.TopicPrefix + channel
}

// metaTopicName derives the topic holding a channel's term claims and
// truncation points.
func (c *Config) metaTopicName(channel string) string { return c.topicName(channel) + metaSuffix }

// receiverQueue maps a read-ahead in bytes to a receiver queue size.
func receiverQueue(readAhead int) int {
	return min(max(readAhead/(4<<10), 10), 1000)
}
