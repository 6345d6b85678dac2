package consumers

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/meta"
)

// formatVersion is the version of every value this package writes.
const formatVersion = 1

// DefaultPrefix is where a Store keeps its keys by default.
const DefaultPrefix = "checkpoints/"

// keys builds the store keys under one prefix.
type keys struct{ prefix string }

func (k keys) channel(name string) string { return k.prefix + name + "/" }
func (k keys) floor(channel string) string {
	return k.channel(channel) + "floor"
}

func (k keys) consumer(channel string, sc Scope) string {
	if sc.VChannel == "" {
		return k.channel(channel) + "c/" + sc.Consumer
	}
	return k.channel(channel) + "v/" + sc.VChannel + "/" + sc.Consumer
}

// parse splits a key under the prefix into its channel and what it is: the
// floor, or a consumer's scope. ok is false for a key of another shape
// (left alone: a later version's).
func (k keys) parse(key string) (channel string, floor bool, sc Scope, ok bool) {
	rest, found := strings.CutPrefix(key, k.prefix)
	if !found {
		return "", false, Scope{}, false
	}
	channel, rest, found = strings.Cut(rest, "/")
	if !found || channel == "" {
		return "", false, Scope{}, false
	}
	switch parts := strings.Split(rest, "/"); {
	case len(parts) == 1 && parts[0] == "floor":
		return channel, true, Scope{}, true
	case len(parts) == 2 && parts[0] == "c" && parts[1] != "":
		return channel, false, Scope{Consumer: parts[1]}, true
	case len(parts) == 3 && parts[0] == "v" && parts[1] != "" && parts[2] != "":
		return channel, false, Scope{Consumer: parts[2], VChannel: parts[1]}, true
	}
	return "", false, Scope{}, false
}

// checkpointValue is a consumer's stored checkpoint.
type checkpointValue struct {
	V    int       `json:"v"`
	CP   string    `json:"cp"`
	TT   uint64    `json:"tt"`
	Term int64     `json:"term"`
	At   time.Time `json:"at"`
	// Resume and RTT: a later point the owner moved an idle vchannel
	// consumer to; empty when none.
	Resume string `json:"resume,omitempty"`
	RTT    uint64 `json:"rtt,omitempty"`
}

// floorValue is a channel's truncation point.
type floorValue struct {
	V    int       `json:"v"`
	CP   string    `json:"cp"`
	TT   uint64    `json:"tt"`
	Term int64     `json:"term"`
	At   time.Time `json:"at"`
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("consumers: encode %T: %v", v, err)) // plain structs always encode
	}
	return b
}

// decode decodes a stored value; anything but this version's form is
// meta.ErrCorrupt naming the key.
func decode(key string, data []byte, into any, version func() int) error {
	if err := json.Unmarshal(data, into); err != nil {
		return errors.WithStack(fmt.Errorf("consumers: %s: %w: %w", key, meta.ErrCorrupt, err))
	}
	if v := version(); v != formatVersion {
		return errors.Wrapf(meta.ErrCorrupt, "consumers: %s: format version %d (this streamwal reads %d)", key, v, formatVersion)
	}
	return nil
}
