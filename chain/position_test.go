package chain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/walimpls"
)

func TestLocate(t *testing.T) {
	c := threeSegments()
	c.Segments = c.Segments[1:]
	s, err := c.Locate(cursor.Position{Segment: 2, ID: "1:5"})
	require.NoError(t, err)
	require.Equal(t, uint64(2), s.Index)

	_, err = c.Locate(cursor.Position{ID: "17"})
	errmarktest.Is(t, err, walimpls.ErrPositionGone)
	require.Contains(t, err.Error(), "the chain starts at segment 1")

	_, err = c.Locate(cursor.Position{Segment: 3, ID: "1"})
	errmarktest.Is(t, err, chain.ErrUnknownSegment)
}
