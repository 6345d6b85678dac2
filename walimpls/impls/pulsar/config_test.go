package pulsar

import (
	"context"
	"reflect"
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
	require.NoError(t, Config{ServiceURL: "pulsar://x:1", AdminURL: "https://broker:8443/"}.Validate())

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
		"admin scheme":    {ServiceURL: "pulsar://x:1", AdminURL: "pulsar://x:8080"},
		"admin no host":   {ServiceURL: "pulsar://x:1", AdminURL: "http://"},
		"admin query":     {ServiceURL: "pulsar://x:1", AdminURL: "http://x:8080/?a=b"},
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

// An AdminURL provides the topic operations no hook provides; hooks set in
// code take precedence.
func TestAdminURLProvidesHooks(t *testing.T) {
	own := func(context.Context, string) error { return nil }
	cfg := Config{ServiceURL: "pulsar://127.0.0.1:1", MaxMessageBytes: 1 << 20, AdminURL: "http://127.0.0.1:1", DeleteTopic: own}
	o, err := New(context.Background(), cfg, nil, nil)
	require.NoError(t, err)
	defer o.Close()
	require.NotNil(t, o.cfg.TakeOver)
	require.NotNil(t, o.cfg.TopicExists)
	require.Equal(t, reflect.ValueOf(own).Pointer(), reflect.ValueOf(o.cfg.DeleteTopic).Pointer(), "a hook set in code is kept")

	a, err := newAdminClient(&o.cfg)
	require.NoError(t, err)
	u, err := a.topicURL("persistent://t/ns/streamwal-a.b=meta")
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:1/admin/v2/persistent/t/ns/streamwal-a.b=meta", u)
	_, err = a.topicURL("non-persistent://t/ns/x")
	require.Error(t, err)
}
