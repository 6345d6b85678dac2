package adaptor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
)

// TestDeliverSpec checks that every policy comes apart into what built it.
func TestDeliverSpec(t *testing.T) {
	o := memOpener(t, memory.NewCluster(), memory.Config{})
	id, err := o.UnmarshalID("7")
	require.NoError(t, err)
	for _, tc := range []struct {
		p    DeliverPolicy
		want DeliverSpec
	}{
		{DeliverPolicy{}, DeliverSpec{Kind: KindAll}},
		{DeliverAll(), DeliverSpec{Kind: KindAll}},
		{DeliverLatest(), DeliverSpec{Kind: KindLatest}},
		{DeliverStartFrom(id), DeliverSpec{Kind: KindStartFrom, ID: id}},
		{DeliverStartAfter(id), DeliverSpec{Kind: KindStartAfter, ID: id}},
		{DeliverFromTimeTick(9), DeliverSpec{Kind: KindFromTimeTick, TimeTick: 9}},
		{DeliverAfter(cursor.Checkpoint{Position: id, TimeTick: 12}), DeliverSpec{Kind: KindAfter, ID: id, TimeTick: 12}},
		{DeliverAfter(cursor.Checkpoint{}), DeliverSpec{Kind: KindAll}},
	} {
		got := tc.p.Spec()
		require.Equal(t, tc.want.Kind, got.Kind, tc.p)
		require.Equal(t, tc.want.TimeTick, got.TimeTick)
		require.True(t, tc.want.ID.EQ(got.ID) || tc.want.ID.IsZero() && got.ID.IsZero(), "%v", tc.p)
	}
}
