package walimpls_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

type fakeConfig struct {
	Size int `json:"size"`
}

// fakeOpener is an Opener whose nil pointer a constructor may return.
type fakeOpener struct {
	walimpls.Opener
	cfg  fakeConfig
	opts walimpls.Deps
}

func TestNewBuilder(t *testing.T) {
	errRefused := errors.New("refused")
	build := func(_ context.Context, cfg fakeConfig, opts ...walimpls.Option) (*fakeOpener, error) {
		if cfg.Size < 0 {
			return nil, errRefused
		}
		return &fakeOpener{cfg: cfg, opts: walimpls.ApplyOptions(opts...)}, nil
	}
	b := walimpls.NewBuilder("fake", build)
	require.Equal(t, "fake", b.Name())
	decode := func(text string) walimpls.ConfigDecoder {
		return func(into any) error { return json.Unmarshal([]byte(text), into) }
	}

	o, err := b.Build(context.Background(), walimpls.BuildParams{})
	require.NoError(t, err)
	require.Equal(t, fakeConfig{}, o.(*fakeOpener).cfg, "no section: the defaults")

	o, err = b.Build(context.Background(), walimpls.BuildParams{Config: decode(`{"size": 3}`)})
	require.NoError(t, err)
	require.Equal(t, 3, o.(*fakeOpener).cfg.Size)
	require.NotNil(t, o.(*fakeOpener).opts.Logger, "the params' options reach the constructor")

	_, err = b.Build(context.Background(), walimpls.BuildParams{Config: decode(`{"size": "x"}`)})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.ErrorContains(t, err, "fake: decode config")

	o, err = b.Build(context.Background(), walimpls.BuildParams{Config: decode(`{"size": -1}`)})
	require.ErrorIs(t, err, errRefused)
	require.Nil(t, o, "a failed build returns a nil Opener, not a typed nil pointer")
}
