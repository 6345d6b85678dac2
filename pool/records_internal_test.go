package pool

import (
	"encoding/json"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/meta"
)

// A stored value that is not JSON is meta.ErrCorrupt naming its key, and
// keeps the decoder's error as a cause.
func TestDecodeKeepsTheCause(t *testing.T) {
	var v headValue
	err := decode("pool/p/alloc/head", []byte("{not json"), &v, func() int { return v.V })
	require.ErrorIs(t, err, meta.ErrCorrupt)
	var syntax *json.SyntaxError
	require.True(t, errors.As(err, &syntax), "the JSON error is a cause: %v", err)
	require.Contains(t, err.Error(), "pool/p/alloc/head")
}
