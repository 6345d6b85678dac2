package s3

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/walimpls"
)

func TestBuilder(t *testing.T) {
	require.Equal(t, Name, NewBuilder().Name())
	_, err := NewBuilder().Build(context.Background(), walimpls.BuildParams{Config: func(any) error { return errors.New("yaml: bad") }})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	_, err = NewBuilder().Build(context.Background(), walimpls.BuildParams{})
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig, "no bucket")
	for _, bad := range []Config{
		{Bucket: "b", Prefix: "no-slash"},
		{Bucket: "b", Prefix: "/abs/"},
		{Bucket: "b", Endpoint: "ftp://x"},
		{Bucket: "b", FlushInterval: -1},
		{Bucket: "b", ProbeRacers: 1},
		{Bucket: "b", CAFile: "/does/not/exist"},
	} {
		_, err := New(context.Background(), bad)
		require.ErrorIs(t, err, walimpls.ErrInvalidConfig, "%+v", bad)
	}
}

// Credentials from a shared-credentials file and profile, the way a
// config file names them; the secret appears in no error.
func TestCredentialsFile(t *testing.T) {
	st := newTestStore(t, withHandler(checkCredentials))
	dir := t.TempDir()
	file := filepath.Join(dir, "credentials")
	require.NoError(t, os.WriteFile(file, []byte("[other]\naws_access_key_id = intruder\naws_secret_access_key = s3cr3t-value\n\n[wal]\naws_access_key_id = streamwal\naws_secret_access_key = streamwal-secret\n"), 0o600))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	cfg := st.config(nil)
	cfg.Credentials = nil
	cfg.CredentialsFile, cfg.Profile = file, "wal"
	newOpener(t, cfg)

	cfg.Profile = "other"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := New(ctx, cfg)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.NotContains(t, err.Error(), "s3cr3t")
}
