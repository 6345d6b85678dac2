package chain_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/meta"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range []chain.Chain{threeSegments(), {Channel: "x", Segments: []chain.Segment{{Index: 7, Backend: pulsar("x"), FirstTerm: 3, Created: at}}}} {
		data, err := chain.Encode(c)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(data), `{"v":1,"channel":`), "%s", data)
		got, err := chain.Decode(chain.Key(c.Channel), data)
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
}

func TestDecodeRefusesWhatItCannotRead(t *testing.T) {
	valid, err := chain.Encode(threeSegments())
	require.NoError(t, err)
	key := chain.Key("orders")
	cases := []struct {
		name, data, want string
	}{
		{"not JSON", `{"v":1,`, "unexpected end"},
		{"no version", `{"channel":"orders"}`, "no format version"},
		{"version 0", `{"v":0,"channel":"orders"}`, "format version 0"},
		{"unknown field", strings.Replace(string(valid), `"channel":`, `"shard":3,"channel":`, 1), `unknown field "shard"`},
		{"trailing data", string(valid) + `{}`, "after top-level value"},
		{"broken invariant", strings.Replace(string(valid), `"first_term":4`, `"first_term":5`, 1), "not at segment 0's seal term 4"},
		{"another channel's chain", strings.Replace(string(valid), `"channel":"orders",`, `"channel":"other",`, 1), `holds the chain of "other"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chain.Decode(key, []byte(tc.data))
			errmarktest.Is(t, err, meta.ErrCorrupt)
			errmarktest.IsNot(t, err, chain.ErrNewerFormat)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), key)
		})
	}

	spaced := local
	spaced.Params = []byte(` { "dir" : "./data" } `)
	require.True(t, spaced.Equal(local), "params compare as compact JSON")
	spaced.Params = []byte(`{"dir":"./other"}`)
	require.False(t, spaced.Equal(local))

	_, err = chain.Decode(key, []byte(`{"v":2,"layout":"unknown to v1"}`))
	errmarktest.Is(t, err, chain.ErrNewerFormat)
	errmarktest.Is(t, err, meta.ErrCorrupt)
	require.Contains(t, err.Error(), "format version 2, this streamwal reads up to 1")
}
