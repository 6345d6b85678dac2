package pool

import (
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Strategy names how the pchannel of a new vchannel is chosen: RoundRobin,
// LeastLoaded, or a name the embedder supplies a Placer for in
// Options.Placers.
type Strategy string

const (
	// RoundRobin gives pchannels in turn; the cursor is persisted, so a
	// restart continues where the pool stopped.
	RoundRobin Strategy = "round-robin"
	// LeastLoaded gives the pchannel with the fewest vchannels, or the least
	// load when Options.Load reports one; ties go to the lowest index.
	LeastLoaded Strategy = "least-loaded"
)

// Config describes a pool. The zero value of a field takes the documented
// default.
type Config struct {
	// Name names the pool in the store; default "default".
	Name string `yaml:"name"`
	// Size is the number of pchannels; default 16. It may grow between
	// runs, never shrink.
	Size int `yaml:"size"`
	// Prefix names the pchannels: Prefix followed by the index from 0;
	// default "streamwal-pchannel-".
	Prefix string `yaml:"prefix"`
	// Strategy is RoundRobin (the default), LeastLoaded, or the name of a
	// Placer in Options.Placers (Open refuses a name it has no Placer
	// for). It is recorded with the pool, and may change between runs: it
	// only decides where later vchannels go.
	Strategy Strategy `yaml:"strategy"`
}

// Default values of Config.
const (
	DefaultName   = "default"
	DefaultSize   = 16
	DefaultPrefix = "streamwal-pchannel-"
	// MaxSize bounds Size.
	MaxSize = 4096
)

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Strategy == "" {
		c.Strategy = RoundRobin
	}
	return c
}

// Validate reports an ErrInvalidConfig error for a configuration no pool
// can use. A strategy name is checked for its form only (the characters of
// a channel name): whether a Placer is supplied for it is known to Open.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := walimpls.ValidateChannelName(c.Name); err != nil {
		return errors.WithStack(fmt.Errorf("pool name: %w: %w", err, ErrInvalidConfig))
	}
	if c.Size < 1 || c.Size > MaxSize {
		return errors.Wrapf(ErrInvalidConfig, "pool %q: size %d (1 to %d)", c.Name, c.Size, MaxSize)
	}
	if err := walimpls.ValidateChannelName(pchannelName(c.Prefix, c.Size-1)); err != nil {
		return errors.WithStack(fmt.Errorf("pool %q: prefix %q does not make valid channel names: %w: %w", c.Name, c.Prefix, err, ErrInvalidConfig))
	}
	if err := walimpls.ValidateChannelName(string(c.Strategy)); err != nil {
		return errors.WithStack(fmt.Errorf("pool %q: strategy %q is not a name: %w: %w", c.Name, c.Strategy, err, ErrInvalidConfig))
	}
	return nil
}

// pchannelName is the name of pchannel i.
func pchannelName(prefix string, i int) string { return fmt.Sprintf("%s%d", prefix, i) }
