package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{SeedBrokers: []string{"127.0.0.1:9092"}}
	require.NoError(t, ok.Validate())
	d := ok.withDefaults()
	assert.Equal(t, DefaultTopicPrefix, d.TopicPrefix)
	assert.Equal(t, int32(2), d.Partitions)
	assert.Equal(t, "-1", d.TopicConfigs["retention.ms"])
	assert.False(t, d.DisableTransactions, "transactions are on by default")

	for name, c := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"no brokers":       {func(c *Config) { c.SeedBrokers = nil }, "no seed brokers"},
		"blank broker":     {func(c *Config) { c.SeedBrokers = []string{" "} }, "seed broker"},
		"bad prefix":       {func(c *Config) { c.TopicPrefix = "wal/" }, "topic prefix"},
		"long prefix":      {func(c *Config) { c.TopicPrefix = strings.Repeat("p", 200) }, "leaves no room"},
		"bad txn prefix":   {func(c *Config) { c.TransactionalIDPrefix = "a b" }, "transactional id prefix"},
		"one partition":    {func(c *Config) { c.Partitions = 1 }, "at least 2"},
		"compacted":        {func(c *Config) { c.TopicConfigs = map[string]string{"cleanup.policy": "compact,delete"} }, "compacted"},
		"bad max bytes":    {func(c *Config) { c.TopicConfigs = map[string]string{"max.message.bytes": "x"} }, "max.message.bytes"},
		"negative timeout": {func(c *Config) { c.DialTimeout = -time.Second }, "negative dial timeout"},
		"short txn":        {func(c *Config) { c.TransactionTimeout = time.Millisecond }, "transaction timeout"},
		"tiny limit":       {func(c *Config) { c.MaxMessageBytes = 10 }, "framing overhead"},
		"cert without key": {func(c *Config) { c.TLS.CertFile = "c.pem" }, "go together"},
		"sasl mechanism":   {func(c *Config) { c.SASL.Mechanism = "GSSAPI" }, "sasl mechanism"},
		"sasl user":        {func(c *Config) { c.SASL.Mechanism = "SCRAM-SHA-512" }, "empty username"},
	} {
		cfg := ok
		c.mod(&cfg)
		err := cfg.Validate()
		require.ErrorIs(t, err, walimpls.ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
}

func TestBuilder(t *testing.T) {
	t.Parallel()
	b := NewBuilder()
	assert.Equal(t, "kafka", b.Name())
	_, err := b.Build(context.Background(), walimpls.BuildParams{})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig, "no brokers")
	_, err = b.Build(context.Background(), walimpls.BuildParams{Config: func(any) error { return assert.AnError }})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)

	c := newCluster(t)
	o, err := b.Build(context.Background(), walimpls.BuildParams{Config: func(into any) error {
		cfg := into.(*Config)
		cfg.SeedBrokers = c.ListenAddrs()
		cfg.DisableTransactions = true
		return nil
	}})
	require.NoError(t, err)
	defer o.Close()
	assert.False(t, o.Capabilities().Fencing)
	assert.True(t, o.Capabilities().Durable)
	_, err = o.UnmarshalID("-1")
	require.Error(t, err)
	id, err := o.UnmarshalID("42")
	require.NoError(t, err)
	assert.Equal(t, "42", id.Marshal())
}

func TestWireSize(t *testing.T) {
	t.Parallel()
	m := msg(t, "0123456789", map[string]string{"a": "b"})
	// batch header, length, attrs, ts delta (worst 10), offset delta (worst
	// 5), key, value len+10, header count, key len+1, value len+1
	assert.Equal(t, 61+1+1+10+5+1+1+10+1+1+1+1+1, wireSize(m))
	assert.LessOrEqual(t, wireSize(m)-m.Size(), recordOverhead)
}
