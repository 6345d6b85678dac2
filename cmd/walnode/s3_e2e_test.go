package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/s3dev"
)

// TestDevS3: a walnode with -dev-s3 (its in-memory store on a port it
// picks) and -default s3 begins its channels on s3, appends and reads
// through the client, and moves a channel s3 → local → s3 with walctl's
// request: every acknowledged append is read back once, in order, across
// the three segments. It says the store is for trying only, and writes the
// store's credentials where other nodes can take them.
func TestDevS3(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a walnode process")
	}
	c := newE2EClusterWith(t, 1, 2*time.Second, func(string) []string {
		return []string{"-dev-s3", "127.0.0.1:0", "-default", "s3"}
	})
	c.waitAssigned(6)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const ch = "pch-0"
	var acked []string
	appendSome := func(tag string, n int) { acked = append(acked, c.appendTagged(ctx, ch, tag, n)...) }
	appendSome("on-s3", 5)
	require.Equal(t, acked, c.readAll(ch, acked))

	chains := c.chains()
	for _, to := range []string{"local", "s3"} {
		c.migrate(ctx, ch, to)
		cur := c.waitMigrated(ctx, chains, ch, to)
		require.NoError(t, cur.Validate())
		appendSome("on-"+to+"-again", 5)
	}
	cur, err := chains.Get(ctx, ch)
	require.NoError(t, err)
	var path []string
	for _, seg := range cur.Segments {
		path = append(path, seg.Backend.Name)
	}
	require.Equal(t, []string{"s3", "local", "s3"}, path)
	require.Contains(t, string(cur.Segments[0].Backend.Params), `"bucket":"`+s3dev.DefaultBucket+`"`)
	require.Equal(t, acked, c.readAll(ch, acked), "every acknowledged append once, in order, across the segments")

	// The store proved it fences, on the node's metrics.
	proven := c.metrics(ctx, "n1")[`streamwal_s3_conditional_writes_proven{backend="s3"}`]
	require.Equal(t, 1.0, proven)
	creds, err := os.ReadFile(filepath.Join(c.dir, "n1", "dev-s3-credentials"))
	require.NoError(t, err)
	require.Contains(t, string(creds), s3dev.AccessKey)
	c.stop("n1", syscall.SIGTERM)
	logText, err := os.ReadFile(c.nodes["n1"].log)
	require.NoError(t, err)
	require.Contains(t, string(logText), "running an in-memory S3-compatible store (gofakes3): for trying only")
	require.NotContains(t, string(logText), s3dev.SecretKey, "the credentials are in their file, not in the log")
	require.True(t, strings.Contains(string(logText), "walnode ready") && strings.Contains(string(logText), "backend=s3"), "the node says it began on s3")
}
