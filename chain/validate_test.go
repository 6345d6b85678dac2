package chain_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
)

func TestValidateAcceptsValidChains(t *testing.T) {
	require.NoError(t, threeSegments().Validate())

	one := chain.Chain{Channel: "orders", Segments: []chain.Segment{{Backend: local, Created: at}}}
	require.NoError(t, one.Validate(), "a channel adopted at term 0")

	pruned := threeSegments()
	pruned.Segments = pruned.Segments[2:]
	pruned.Pending = nil
	require.NoError(t, pruned.Validate(), "a chain whose first kept segment is not 0")

	empty := threeSegments()
	empty.Segments[1].Seal.End, empty.Segments[1].Seal.TimeTick = "", 100
	require.NoError(t, empty.Validate(), "an empty segment keeps the previous seal's timetick")

	back := threeSegments()
	back.Pending.Target = chain.Backend{Name: "kafka", Kind: "kafka", Channel: "orders-s3"}
	require.NoError(t, back.Validate(), "back to an earlier segment's backend, on another channel")
}

// TestValidateRejectsBrokenInvariants breaks each rule of the package
// documentation once.
func TestValidateRejectsBrokenInvariants(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *chain.Chain)
		want   string
		is     error // besides chain.ErrInvalid
	}{
		{"bad channel name", func(c *chain.Chain) { c.Channel = "a/b" }, "is not one of", nil},
		{"no segments", func(c *chain.Chain) { c.Segments = nil }, "0 segments", nil},
		{"too many segments", func(c *chain.Chain) {
			c.Segments = make([]chain.Segment, chain.MaxSegments+1)
		}, "257 segments", nil},
		{"index gap", func(c *chain.Chain) { c.Segments[2].Index = 3 }, "segment 3 follows segment 1", nil},
		{"index reused", func(c *chain.Chain) { c.Segments[1].Index = 0 }, "segment 0 follows segment 0", nil},
		{"last sealed", func(c *chain.Chain) {
			c.Segments[2].Seal = &chain.Seal{Term: 12, End: "1:2", TimeTick: 300, At: at}
		}, "last segment 2 is sealed", nil},
		{"earlier unsealed", func(c *chain.Chain) { c.Segments[1].Seal = nil }, "segment 1 is not the last but is not sealed", nil},
		{"seal term not above first term", func(c *chain.Chain) { c.Segments[0].Seal.Term = 1 }, "seal term 1 is not above its first term 1", nil},
		{"next first term is not the seal term", func(c *chain.Chain) { c.Segments[1].FirstTerm = 5 }, "segment 1 begins at term 5, not at segment 0's seal term 4", nil},
		{"negative first term", func(c *chain.Chain) { c.Segments[0].FirstTerm = -1 }, "negative first term", nil},
		{"no creation time", func(c *chain.Chain) { c.Segments[1].Created = time.Time{} }, "no creation time", nil},
		{"no seal time", func(c *chain.Chain) { c.Segments[0].Seal.At = time.Time{} }, "seal has no time", nil},
		{"timetick goes back", func(c *chain.Chain) { c.Segments[1].Seal.TimeTick = 99 }, "seal timetick 99 is below the previous seal's 100", nil},
		{"timetick does not grow over a non-empty segment", func(c *chain.Chain) { c.Segments[1].Seal.TimeTick = 100 }, "is not above the previous seal's", nil},
		{"non-empty first segment at timetick 0", func(c *chain.Chain) { c.Segments[0].Seal.TimeTick = 0 }, "is not above the previous seal's", nil},
		{"seal end not an id", func(c *chain.Chain) { c.Segments[0].Seal.End = "1 7" }, "not printable ascii", nil},
		{"neighbours on one backend", func(c *chain.Chain) {
			c.Segments[1].Backend = chain.Backend{Name: "local", Kind: "local", Channel: "orders-s1"}
		}, "segments 0 and 1 are both on backend \"local\"", nil},
		{"two segments share a backend channel", func(c *chain.Chain) {
			c.Segments[2].Backend = local
			c.Pending = nil
		}, "segments 0 and 2 share backend channel local/orders", nil},
		{"backend without name", func(c *chain.Chain) { c.Segments[0].Backend.Name = "" }, "backend name", nil},
		{"backend without kind", func(c *chain.Chain) { c.Segments[0].Backend.Kind = "" }, "backend kind", nil},
		{"backend name with a slash", func(c *chain.Chain) { c.Segments[0].Backend.Name = "kafka/east" }, "is not one of", nil},
		{"backend channel invalid", func(c *chain.Chain) { c.Segments[0].Backend.Channel = ".." }, "channel name", nil},
		{"params not an object", func(c *chain.Chain) { c.Segments[0].Backend.Params = json.RawMessage(`[1]`) }, "not a JSON object", nil},
		{"params not JSON", func(c *chain.Chain) { c.Segments[0].Backend.Params = json.RawMessage(`{"dir":`) }, "not a JSON object", nil},
		{"params too large", func(c *chain.Chain) {
			c.Segments[0].Backend.Params = json.RawMessage(`{"x":"` + strings.Repeat("a", chain.MaxParamsLen) + `"}`)
		}, "exceed", nil},
		{"pending to the current backend", func(c *chain.Chain) {
			c.Pending.Target = chain.Backend{Name: "pulsar", Kind: "pulsar", Channel: "orders-s3"}
		}, "the last segment's", chain.ErrSameBackend},
		{"pending to a kept segment's channel", func(c *chain.Chain) { c.Pending.Target = local }, "targets backend channel local/orders of segment 0", nil},
		{"pending at a stale term", func(c *chain.Chain) { c.Pending.Term = 9 }, "term 9 is not above", chain.ErrStaleTerm},
		{"pending without requester", func(c *chain.Chain) { c.Pending.By = "" }, "requester", nil},
		{"pending requester with a newline", func(c *chain.Chain) { c.Pending.By = "a\nb" }, "control byte", nil},
		{"pending without time", func(c *chain.Chain) { c.Pending.At = time.Time{} }, "no time", nil},
		{"pending target invalid", func(c *chain.Chain) { c.Pending.Target.Kind = "" }, "backend kind", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := threeSegments()
			tc.mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			errmarktest.Is(t, err, chain.ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
			if tc.is != nil {
				errmarktest.Is(t, err, tc.is)
			}
			_, err = chain.Encode(c)
			errmarktest.Is(t, err, chain.ErrInvalid)
		})
	}
}
