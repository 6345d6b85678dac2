package pulsar

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
	ok := Config{ServiceURL: "pulsar://127.0.0.1:6650"}
	require.NoError(t, ok.Validate())
	d := ok.withDefaults()
	assert.Equal(t, "persistent://public/default/streamwal-ch.1", d.topicName("ch.1"))
	assert.Equal(t, "persistent://public/default/streamwal-ch.1=meta", d.metaTopicName("ch.1"))
	assert.Equal(t, DefaultOperationTimeout, d.OperationTimeout)
	assert.Equal(t, DefaultSubscription, d.Subscription)
	require.NoError(t, Config{ServiceURL: "pulsar+ssl://broker:6651", Tenant: "t", Namespace: "ns=1"}.Validate())

	for name, c := range map[string]Config{
		"no url":          {},
		"bad scheme":      {ServiceURL: "http://x:8080"},
		"no host":         {ServiceURL: "pulsar://"},
		"bad tenant":      {ServiceURL: "pulsar://x:1", Tenant: "a/b"},
		"bad prefix":      {ServiceURL: "pulsar://x:1", TopicPrefix: "a=b"},
		"bad sub":         {ServiceURL: "pulsar://x:1", Subscription: "a b"},
		"negative op":     {ServiceURL: "pulsar://x:1", OperationTimeout: -time.Second},
		"tiny max":        {ServiceURL: "pulsar://x:1", MaxMessageBytes: 100},
		"negative batch":  {ServiceURL: "pulsar://x:1", MaxBatchMessages: -1},
		"missing ca file": {ServiceURL: "pulsar+ssl://x:1", TLS: TLS{TrustCertsFile: "/nonexistent/ca.pem"}},
	} {
		err := c.Validate()
		require.ErrorIsf(t, err, walimpls.ErrInvalidConfig, "%s", name)
		assert.Truef(t, strings.HasPrefix(err.Error(), "pulsar: "), "%s: %v", name, err)
	}
	_, err := New(context.Background(), Config{}, nil, nil)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	_, err = NewBuilder().Build(context.Background(), walimpls.BuildParams{Config: func(any) error { return assert.AnError }})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	assert.Equal(t, Name, NewBuilder().Name())
}
