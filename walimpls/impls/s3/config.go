package s3

import (
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Name is the backend's name in configuration and in its IDs.
const Name = "s3"

// Defaults of Config (see the package documentation, "Defaults and what
// they cost").
const (
	DefaultPrefix           = "streamwal/"
	DefaultRegion           = "us-east-1"
	DefaultFlushInterval    = 200 * time.Millisecond
	DefaultFlushBytes       = 4 << 20
	DefaultFlushRecords     = 10_000
	DefaultMaxInflight      = 4
	DefaultMaxBufferedBytes = 64 << 20
	DefaultHintEvery        = 64
	DefaultPollInterval     = 200 * time.Millisecond
	DefaultReadAhead        = 8
	DefaultReadAheadBytes   = 32 << 20
	DefaultMaxAttempts      = 5
	DefaultProbeRacers      = 8
	DefaultMaxMessageBytes  = 16 << 20
	DefaultRequestTimeout   = 30 * time.Second
)

// Config configures an Opener: where the store is, how the writer flushes
// and how readers fetch. The zero value of a field takes its default;
// Bucket is required.
type Config struct {
	// Endpoint is the store's URL ("https://s3.example.com:9000",
	// "http://127.0.0.1:7070"); empty: AWS S3 of Region.
	Endpoint string `yaml:"endpoint"`
	// Bucket holds every channel's objects; it must exist.
	Bucket string `yaml:"bucket"`
	// Prefix is put before every key; it ends with "/" (or is "/" alone
	// for none). Default DefaultPrefix.
	Prefix string `yaml:"prefix"`
	// Region is the store's region; default DefaultRegion.
	Region string `yaml:"region"`
	// PathStyle addresses the bucket in the path (endpoint/bucket/key)
	// instead of the host name: most stores other than AWS want it.
	PathStyle bool `yaml:"pathStyle"`
	// CredentialsFile is a shared-credentials file (the format of
	// ~/.aws/credentials) to take the credentials of Profile from; empty:
	// the usual AWS chain (environment, shared files, instance role).
	CredentialsFile string `yaml:"credentialsFile"`
	// Profile is the profile of the credentials; empty: "default" (or
	// $AWS_PROFILE with the usual chain).
	Profile string `yaml:"profile"`
	// CAFile is a PEM bundle of the CAs that verify the store's TLS
	// certificate, beside the system's; empty: the system's.
	CAFile string `yaml:"caFile"`
	// Unfenced runs without the proof that the store honours conditional
	// writes atomically: for a store that does not, with a single writer.
	// The backend then declares no fencing, and says so in the log.
	Unfenced bool `yaml:"unfenced"`

	// FlushInterval is how long the oldest queued append waits for others
	// to share its object; FlushBytes and FlushRecords flush sooner.
	FlushInterval time.Duration `yaml:"flushInterval"`
	FlushBytes    int           `yaml:"flushBytes"`
	FlushRecords  int           `yaml:"flushRecords"`
	// MaxInflight bounds the flushes in flight at once. A flush may run
	// up to twice as many slots ahead of the last one acknowledged (the
	// epoch's window), so that one slow PUT does not hold the others back.
	MaxInflight int `yaml:"maxInflight"`
	// MaxBufferedBytes bounds the bytes of appends queued or in flight;
	// an append beyond it waits.
	MaxBufferedBytes int `yaml:"maxBufferedBytes"`
	// HintEvery is how many slots a writer flushes between two hints (the
	// tail search's start).
	HintEvery int `yaml:"hintEvery"`
	// PollInterval is how often a tailing reader looks for the next slot
	// while it waits.
	PollInterval time.Duration `yaml:"pollInterval"`
	// ReadAhead and ReadAheadBytes bound what a catching-up scanner
	// fetches in parallel.
	ReadAhead      int `yaml:"readAhead"`
	ReadAheadBytes int `yaml:"readAheadBytes"`
	// MaxAttempts bounds the tries of one request on a transient failure
	// (500, 503 SlowDown, a timeout), with backoff.
	MaxAttempts int `yaml:"maxAttempts"`
	// RequestTimeout bounds one try of a request.
	RequestTimeout time.Duration `yaml:"requestTimeout"`
	// ProbeRacers is how many create-only PUTs race for the probe's key.
	ProbeRacers int `yaml:"probeRacers"`
	// MaxMessageBytes is the largest Message.Size accepted; the adaptor
	// splits larger messages into parts.
	MaxMessageBytes int `yaml:"maxMessageBytes"`

	// Credentials, when set (code only), are the credentials to use,
	// instead of the chain or CredentialsFile.
	Credentials aws.CredentialsProvider `yaml:"-" json:"-"`
	// HTTPClient, when set (code only), carries every request (tests put a
	// fault-injecting proxy there); its TLS settings are the caller's.
	HTTPClient *http.Client `yaml:"-" json:"-"`
}

// Validate reports a configuration no Opener can use.
func (c Config) Validate() error {
	if c.Bucket == "" {
		return errors.Wrap(walimpls.ErrInvalidConfig, "s3: bucket is required")
	}
	if c.Prefix != "" && c.Prefix != "/" && !strings.HasSuffix(c.Prefix, "/") {
		return errors.Wrapf(walimpls.ErrInvalidConfig, "s3: prefix %q must end with /", c.Prefix)
	}
	if c.Prefix != "" && c.Prefix != "/" && strings.HasPrefix(c.Prefix, "/") {
		return errors.Wrapf(walimpls.ErrInvalidConfig, "s3: prefix %q must not begin with /", c.Prefix)
	}
	if c.Endpoint != "" && !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://") {
		return errors.Wrapf(walimpls.ErrInvalidConfig, "s3: endpoint %q is not an http:// or https:// URL", c.Endpoint)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"flushInterval", int64(c.FlushInterval)}, {"flushBytes", int64(c.FlushBytes)}, {"flushRecords", int64(c.FlushRecords)},
		{"maxInflight", int64(c.MaxInflight)}, {"maxBufferedBytes", int64(c.MaxBufferedBytes)}, {"hintEvery", int64(c.HintEvery)},
		{"pollInterval", int64(c.PollInterval)}, {"readAhead", int64(c.ReadAhead)}, {"readAheadBytes", int64(c.ReadAheadBytes)},
		{"maxAttempts", int64(c.MaxAttempts)}, {"requestTimeout", int64(c.RequestTimeout)}, {"probeRacers", int64(c.ProbeRacers)},
		{"maxMessageBytes", int64(c.MaxMessageBytes)},
	} {
		if f.v < 0 {
			return errors.Wrapf(walimpls.ErrInvalidConfig, "s3: negative %s", f.name)
		}
	}
	if c.ProbeRacers == 1 {
		return errors.Wrap(walimpls.ErrInvalidConfig, "s3: probeRacers 1 proves nothing: at least 2")
	}
	return nil
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	} else if c.Prefix == "/" {
		c.Prefix = ""
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	defD(&c.FlushInterval, DefaultFlushInterval)
	def(&c.FlushBytes, DefaultFlushBytes)
	def(&c.FlushRecords, DefaultFlushRecords)
	def(&c.MaxInflight, DefaultMaxInflight)
	def(&c.MaxBufferedBytes, DefaultMaxBufferedBytes)
	def(&c.HintEvery, DefaultHintEvery)
	defD(&c.PollInterval, DefaultPollInterval)
	def(&c.ReadAhead, DefaultReadAhead)
	def(&c.ReadAheadBytes, DefaultReadAheadBytes)
	def(&c.MaxAttempts, DefaultMaxAttempts)
	defD(&c.RequestTimeout, DefaultRequestTimeout)
	def(&c.ProbeRacers, DefaultProbeRacers)
	def(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	return c
}

// window is the epoch's window a writer opened with c records (see the
// package doc, "The writer").
func (c Config) window() int { return 2 * c.MaxInflight }
