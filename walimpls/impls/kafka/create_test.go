package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

// Create makes the channel's topic exist with the configured partitions,
// idempotently, before any WAL opens it.
func TestCreate(t *testing.T) {
	c := newCluster(t)
	cfg := testConfig(c)
	cfg.Partitions = 3
	o := newOpener(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, o.Create(ctx, "pooled"))
	require.NoError(t, o.Create(ctx, "pooled"), "creating again is success")
	md, err := o.adm.Metadata(ctx, o.cfg.topicName("pooled"))
	require.NoError(t, err)
	td := md.Topics[o.cfg.topicName("pooled")]
	require.NoError(t, td.Err)
	require.Len(t, td.Partitions, 3)

	require.ErrorIs(t, o.Create(ctx, "bad name"), walimpls.ErrInvalidChannel)
	w, err := o.Open(ctx, walimpls.Channel{Name: "pooled", Term: 1})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, o.Close())
	require.ErrorIs(t, o.Create(ctx, "pooled"), walimpls.ErrClosed)
}
