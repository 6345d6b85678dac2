package s3dev_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/s3dev"
	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The store is one the s3 backend accepts (its probe proves the
// conditional writes), with the static credentials and with those of the
// file WriteCredentials writes; Close frees its address and stops its
// goroutines.
func TestStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s3dev.Start("127.0.0.1:0", "")
	require.NoError(t, err)
	require.Equal(t, s3dev.DefaultBucket, st.Bucket)

	o, err := s3.New(ctx, st.Config(""))
	require.NoError(t, err)
	require.True(t, o.Capabilities().Fencing, "the probe accepted the store")
	w, err := o.Open(ctx, walimpls.Channel{Name: "orders", Term: 1})
	require.NoError(t, err)
	m, err := message.New([]byte("hello"), nil)
	require.NoError(t, err)
	id, err := walimpls.Append(ctx, w, m)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, o.Close())

	creds := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, s3dev.WriteCredentials(creds))
	cfg := st.Config("")
	cfg.Credentials, cfg.CredentialsFile, cfg.Profile = nil, creds, "default"
	o, err = s3.New(ctx, cfg)
	require.NoError(t, err)
	r, err := o.Open(ctx, walimpls.Channel{Name: "orders", Term: 1, Mode: walimpls.ReadOnly})
	require.NoError(t, err)
	sc, err := r.Read(ctx, walimpls.ReadOption{Name: "t", DeliverPolicy: cursor.All()})
	require.NoError(t, err)
	got := <-sc.Chan()
	require.NotNil(t, got)
	require.Equal(t, "hello", string(got.Payload()))
	require.True(t, got.ID().EQ(id))
	require.NoError(t, sc.Close())
	require.NoError(t, r.Close())
	require.NoError(t, o.Close())

	addr := st.Endpoint[len("http://"):]
	require.NoError(t, st.Close())
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "Close freed the address")
	require.NoError(t, ln.Close())

	_, err = s3dev.Start("not an address", "")
	require.ErrorContains(t, err, "s3dev: listen on not an address")
}
