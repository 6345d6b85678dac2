package retention

import (
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// ErrInvalidConfig means a Config or Policy does not validate.
var ErrInvalidConfig = errors.New("retention: invalid config")

// Policy caps what a channel retains that no consumer committed on. The
// zero Policy caps nothing.
type Policy struct {
	// MaxAge drops messages older than this (by their timeticks); 0: no
	// cap by age.
	MaxAge time.Duration `yaml:"maxAge"`
	// MaxBytes drops the oldest messages while the channel retains more
	// bytes than this; 0: no cap by size.
	MaxBytes int64 `yaml:"maxBytes"`
}

// IsZero reports whether p caps nothing.
func (p Policy) IsZero() bool { return p.MaxAge == 0 && p.MaxBytes == 0 }

// Validate reports a policy with a negative cap.
func (p Policy) Validate() error {
	if p.MaxAge < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative maxAge %s", p.MaxAge)
	}
	if p.MaxBytes < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative maxBytes %d", p.MaxBytes)
	}
	return nil
}

// Config configures a Retainer; it is also the "retention" section of a
// node's configuration file (package walconfig):
//
//	retention:
//	  maxAge: 168h            # the policy of every channel (default: none)
//	  maxBytes: 10737418240
//	  channels:               # per channel name, or prefix ending in "*": the longest match wins
//	    orders-*: {maxAge: 24h}
//	    audit: {}             # no cap for this one
//	  interval: 10s           # every owned channel gets a round this often
//	  commitDelay: 100ms      # a commit brings its channel's round within this
//
// The zero Config takes the defaults and caps nothing.
type Config struct {
	// Policy is the policy of every channel Channels does not name.
	Policy `yaml:",inline"`
	// Channels overrides Policy for channels by name, or by prefix with a
	// trailing "*"; the longest pattern that matches wins.
	Channels map[string]Policy `yaml:"channels"`
	// Interval is how often every owned channel gets a round; default
	// DefaultInterval.
	Interval time.Duration `yaml:"interval"`
	// CommitDelay is how soon after a commit its channel's round runs
	// (commits within it share one round); default DefaultCommitDelay.
	CommitDelay time.Duration `yaml:"commitDelay"`
	// Workers bounds the rounds that run at once; default DefaultWorkers.
	Workers int `yaml:"workers"`
}

// Defaults of Config.
const (
	DefaultInterval    = 10 * time.Second
	DefaultCommitDelay = 100 * time.Millisecond
	DefaultWorkers     = 2
)

// Validate reports settings no retainer can run with.
func (c Config) Validate() error {
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	for pattern, p := range c.Channels {
		if name, wild := strings.CutSuffix(pattern, "*"); !wild || name != "" {
			if err := walimpls.ValidateChannelName(name); err != nil {
				return errors.WithStack(fmt.Errorf("channels: %q is neither a channel name nor a prefix ending in *: %w: %w", pattern, ErrInvalidConfig, err))
			}
		}
		if err := p.Validate(); err != nil {
			return errors.Wrapf(err, "channels: %s", pattern)
		}
	}
	if c.Interval < 0 || c.CommitDelay < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative interval %s or commitDelay %s", c.Interval, c.CommitDelay)
	}
	if c.Workers < 0 {
		return errors.Wrapf(ErrInvalidConfig, "negative workers %d", c.Workers)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.CommitDelay == 0 {
		c.CommitDelay = DefaultCommitDelay
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	return c
}

// For returns the policy of channel: the longest pattern of Channels that
// matches it, else Policy.
func (c Config) For(channel string) Policy {
	best, found := -1, Policy{}
	for pattern, p := range c.Channels {
		prefix, wild := strings.CutSuffix(pattern, "*")
		matches := pattern == channel || (wild && strings.HasPrefix(channel, prefix))
		if matches && len(pattern) > best {
			best, found = len(pattern), p
		}
	}
	if best >= 0 {
		return found
	}
	return c.Policy
}
