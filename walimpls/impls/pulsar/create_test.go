package pulsar

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/pulsartest"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/walimplstest"
)

// Create makes the channel's topics exist with the durable subscription,
// idempotently, before any WAL opens it.
func TestCreate(t *testing.T) {
	b, cfg := startBroker(t, pulsartest.Config{})
	o := newOpener(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, o.Create(ctx, "pooled"))
	require.NoError(t, o.Create(ctx, "pooled"), "creating again is success")
	for _, topic := range []string{o.cfg.topicName("pooled"), o.cfg.metaTopicName("pooled")} {
		st, err := b.Stats(topic)
		require.NoError(t, err, "topic %s", topic)
		require.Contains(t, st.Cursors, o.cfg.Subscription, "the durable subscription of %s", topic)
	}
	require.ErrorIs(t, o.Create(ctx, "bad name"), walimpls.ErrInvalidChannel)
	w := open(t, o, "pooled", 1, walimpls.ReadWrite)
	_, err := walimpls.Append(ctx, w, walimplstest.Message(t, "after create", nil))
	require.NoError(t, err)
	require.NoError(t, o.Close())
	require.ErrorIs(t, o.Create(ctx, "pooled"), walimpls.ErrClosed)
}
