package pool

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// ErrCorruptWALOptions is returned by DecodeWALOptions for a string that is
// not a WAL-options string this version reads.
var ErrCorruptWALOptions = errors.New("pool: corrupt wal options")

// WALOptions is what a node needs to open a vchannel: the backend, the
// pool, the pchannel and the vchannel. Encode gives its versioned string,
// the form to hand to nodes and keep beside the vchannel's own metadata.
type WALOptions struct {
	Backend  string
	Pool     string
	PChannel string
	VChannel string
}

type walOptionsValue struct {
	V        int    `json:"v"`
	Backend  string `json:"backend"`
	Pool     string `json:"pool"`
	PChannel string `json:"pchannel"`
	VChannel string `json:"vchannel"`
}

// Encode returns the versioned string form of o.
func (o WALOptions) Encode() string {
	return string(encode(walOptionsValue{V: formatVersion, Backend: o.Backend, Pool: o.Pool, PChannel: o.PChannel, VChannel: o.VChannel}))
}

// DecodeWALOptions decodes Encode's string. An unknown version, a missing
// field or an invalid channel name is ErrCorruptWALOptions.
func DecodeWALOptions(s string) (WALOptions, error) {
	var v walOptionsValue
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return WALOptions{}, errors.WithStack(fmt.Errorf("%q: %w: %w", clip(s), err, ErrCorruptWALOptions))
	}
	if v.V != formatVersion {
		return WALOptions{}, errors.Wrapf(ErrCorruptWALOptions, "%q: version %d (this streamwal reads %d)", clip(s), v.V, formatVersion)
	}
	o := WALOptions{Backend: v.Backend, Pool: v.Pool, PChannel: v.PChannel, VChannel: v.VChannel}
	if o.Backend == "" {
		return WALOptions{}, errors.Wrapf(ErrCorruptWALOptions, "%q: no backend", clip(s))
	}
	for _, name := range []string{o.Pool, o.PChannel, o.VChannel} {
		if err := walimpls.ValidateChannelName(name); err != nil {
			return WALOptions{}, errors.WithStack(fmt.Errorf("%q: %w: %w", clip(s), err, ErrCorruptWALOptions))
		}
	}
	return o, nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
