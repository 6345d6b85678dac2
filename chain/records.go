package chain

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/meta"
)

// FormatVersion is the version of the chain values this streamwal writes
// and the newest it reads.
const FormatVersion = 1

// keyPrefix is where every chain lives in the store.
const keyPrefix = "chain/"

// Key returns the store key of channel's chain.
func Key(channel string) string { return keyPrefix + channel }

// value is the stored form: the chain with its format version.
type value struct {
	V int `json:"v"`
	Chain
}

// Encode validates c and returns its stored form.
func Encode(c Chain) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(value{V: FormatVersion, Chain: c})
	if err != nil {
		// Plain structs and validated JSON params: not expected.
		return nil, errors.Wrapf(err, "chain %s: encode", c.Channel)
	}
	return b, nil
}

// Decode reads the stored form of the chain under key: ErrNewerFormat
// for a later version, meta.ErrCorrupt (naming key) for a value that does
// not decode, holds an unknown field or breaks an invariant.
func Decode(key string, data []byte) (Chain, error) {
	var head struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Chain{}, corrupt(key, err)
	}
	switch {
	case head.V == nil:
		return Chain{}, corrupt(key, errors.New("no format version"))
	case *head.V > FormatVersion:
		return Chain{}, errmark.Mark(errors.Wrapf(ErrNewerFormat,
			"%s: format version %d, this streamwal reads up to %d: upgrade it before it reads or changes this chain", key, *head.V, FormatVersion), meta.ErrCorrupt)
	case *head.V != FormatVersion:
		return Chain{}, corrupt(key, errors.Newf("format version %d", *head.V))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var v value
	if err := dec.Decode(&v); err != nil {
		return Chain{}, corrupt(key, err)
	}
	if err := v.Chain.Validate(); err != nil {
		return Chain{}, corrupt(key, err)
	}
	if want := Key(v.Channel); want != key {
		return Chain{}, corrupt(key, errors.Newf("holds the chain of %q", v.Channel))
	}
	return v.Chain, nil
}

// corrupt marks err as meta.ErrCorrupt, naming the key.
func corrupt(key string, err error) error {
	return fmt.Errorf("chain: %s: %w: %w", key, err, meta.ErrCorrupt)
}
