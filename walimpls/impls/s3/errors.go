package s3

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// ErrNoConditionalWrites refuses a store that did not prove at open that it
// honours conditional writes atomically (If-None-Match: * and If-Match),
// which is the backend's whole fence. Config.Unfenced runs without the
// proof, for a single writer.
var ErrNoConditionalWrites = errors.New("the store does not honour conditional writes atomically")

// fencedError is the fence of ch's writer; current is the term of the
// fence when known.
func fencedError(ch walimpls.Channel, current int64, deleted bool) error {
	return &walimpls.FencedError{Channel: ch.Name, Term: ch.Term, CurrentTerm: current, Deleted: deleted}
}
