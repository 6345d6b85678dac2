package hlc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/utility/hlc"
)

func TestStrictlyIncreasingWhenTimeStallsOrStepsBack(t *testing.T) {
	wall := clockwork.NewFakeClockAt(time.UnixMilli(1_700_000_000_000))
	c := hlc.New(wall)
	ctx := context.Background()
	a, _ := c.Allocate(ctx)
	b, _ := c.Allocate(ctx)
	require.Equal(t, a+1, b, "same millisecond: logical counter")
	wall.Advance(-time.Hour)
	d, _ := c.Allocate(ctx)
	require.Greater(t, d, b, "clock stepped back")
	wall.Advance(2 * time.Hour)
	e, _ := c.Allocate(ctx)
	require.Equal(t, hlc.Compose(wall.Now(), 0), e, "back to physical time once it is ahead")
	require.Equal(t, wall.Now().UnixMilli(), hlc.Physical(e).UnixMilli())

	c.Observe(e + 1000)
	f, _ := c.Allocate(ctx)
	require.Equal(t, e+1001, f, "above what was observed")
}
