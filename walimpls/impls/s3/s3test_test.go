package s3_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// The shared test store (plain HTTP/1, the client the backend builds for
// itself): open, append, read back, take over, delete.
func TestOnSharedTestStore(t *testing.T) {
	store := s3test.Fake(t)
	cfg := store.Config("smoke/")
	cfg.FlushInterval = 2 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := s3.New(ctx, cfg)
	require.NoError(t, err)
	defer a.Close()
	b, err := s3.New(ctx, cfg)
	require.NoError(t, err)
	defer b.Close()

	w, err := a.Open(ctx, walimpls.Channel{Name: "smoke", Term: 1})
	require.NoError(t, err)
	m, _ := message.New([]byte("hello"), map[string]string{"k": "v"})
	id, err := walimpls.Append(ctx, w, m)
	require.NoError(t, err)
	require.Equal(t, "0.0.0", id.Marshal())

	w2, err := b.Open(ctx, walimpls.Channel{Name: "smoke", Term: 2})
	require.NoError(t, err)
	_, err = walimpls.Append(ctx, w, m)
	require.ErrorIs(t, err, walimpls.ErrFenced)
	s, err := w2.Read(ctx, walimpls.ReadOption{})
	require.NoError(t, err)
	got := <-s.Chan()
	require.Equal(t, "hello", string(got.Payload()))
	require.Equal(t, "v", got.Properties().All()["k"])
	require.NoError(t, s.Close())
	require.NoError(t, b.Delete(ctx, "smoke"))
	_, err = a.Open(ctx, walimpls.Channel{Name: "smoke", Mode: walimpls.ReadOnly})
	require.ErrorIs(t, err, walimpls.ErrNoChannel)
}

// TLS to the store: verified by the configured CA file, and a store whose
// certificate nothing verifies is refused at New with one line.
func TestTLSToTheStore(t *testing.T) {
	store := s3test.FakeTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := store.Config("tls/")
	cfg.FlushInterval = 2 * time.Millisecond
	o, err := s3.New(ctx, cfg)
	require.NoError(t, err)
	defer o.Close()
	w, err := o.Open(ctx, walimpls.Channel{Name: "tls", Term: 1})
	require.NoError(t, err)
	m, _ := message.New([]byte("over tls"), nil)
	_, err = walimpls.Append(ctx, w, m)
	require.NoError(t, err)
	require.NoError(t, w.Close())

	cfg.CAFile = ""
	cfg.MaxAttempts = 1
	_, err = s3.New(ctx, cfg)
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate")
	require.NotContains(t, err.Error(), "\n")
	t.Logf("without the CA: %v", err)
}
