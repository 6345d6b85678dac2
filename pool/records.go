package pool

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/meta"
)

// formatVersion is the version of every value the pool writes.
const formatVersion = 1

// keys builds the store keys of one pool.
type keys struct{ root string }

func newKeys(name string) keys { return keys{root: "pool/" + name + "/"} }

func (k keys) config() string                    { return k.root + "config" }
func (k keys) pchannels() string                 { return k.root + "pchannel/" }
func (k keys) pchannel(name string) string       { return k.root + "pchannel/" + name }
func (k keys) head() string                      { return k.root + "alloc/head" }
func (k keys) logPrefix() string                 { return k.root + "alloc/log/" }
func (k keys) logRecord(seq uint64) string       { return fmt.Sprintf("%s%020d", k.logPrefix(), seq) }
func (k keys) checkpoints() string               { return k.root + "checkpoint/" }
func (k keys) checkpoint(vchannel string) string { return k.root + "checkpoint/" + vchannel }
func (k keys) resume(pchannel string) string     { return k.root + "resume/" + pchannel }

type configValue struct {
	V        int      `json:"v"`
	Backend  string   `json:"backend"`
	Prefix   string   `json:"prefix"`
	Size     int      `json:"size"`
	Strategy Strategy `json:"strategy"`
}

type pchannelValue struct {
	V     int `json:"v"`
	Index int `json:"index"`
}

type headValue struct {
	V    int    `json:"v"`
	Next uint64 `json:"next"` // the sequence of the next record
	RR   uint64 `json:"rr"`   // the turn: vchannels placed so far (round-robin's cursor)
}

type recordValue struct {
	V       int         `json:"v"`
	Alloc   [][2]string `json:"alloc,omitempty"`   // vchannel, pchannel
	Release []string    `json:"release,omitempty"` // vchannels
}

type checkpointValue struct {
	V     int    `json:"v"`
	Alloc uint64 `json:"alloc"` // the record that allocated the vchannel
	Term  int64  `json:"term"`
	TT    uint64 `json:"tt"`
	CP    string `json:"cp"`
}

// resumeValue holds where the idle vchannels of one pchannel resume, once
// the pruner went past their checkpoints (see PruneTarget).
type resumeValue struct {
	V         int                    `json:"v"`
	VChannels map[string]resumePoint `json:"vchannels"`
}

// resumePoint moves one vchannel's resume point from its checkpoint to CP:
// it had no message between a checkpoint at From and CP. It holds while
// the vchannel's checkpoint is of allocation Alloc, at or after From, and
// before CP.
type resumePoint struct {
	Alloc uint64 `json:"alloc"`
	From  uint64 `json:"from"` // timetick of the checkpoint it was moved from
	TT    uint64 `json:"tt"`
	CP    string `json:"cp"`
}

// applies reports whether rp moves the resume point of a vchannel of
// allocation seq whose own checkpoint is cp.
func (rp resumePoint) applies(seq uint64, cp checkpointValue) bool {
	return rp.Alloc == seq && cp.Alloc == seq && cp.TT >= rp.From && rp.TT > cp.TT
}

// encode marshals a value of the pool; its types always marshal.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("pool: encode %T: %v", v, err)) // impossible: plain structs
	}
	return b
}

// decode unmarshals the value of key into v, whose version field must be
// formatVersion; anything else is meta.ErrCorrupt naming the key.
func decode(key string, data []byte, v any, version func() int) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("pool: %s: %w: %w", key, err, meta.ErrCorrupt)
	}
	if got := version(); got != formatVersion {
		return errors.Wrapf(meta.ErrCorrupt, "pool: %s: format version %d (this streamwal reads %d)", key, got, formatVersion)
	}
	return nil
}

// firstSorted returns the first n of names in order, for error messages.
func firstSorted(names []string, n int) []string {
	slices.Sort(names)
	if len(names) > n {
		return append(names[:n:n], "...")
	}
	return names
}
