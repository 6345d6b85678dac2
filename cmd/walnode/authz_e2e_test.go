package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/security/authz"
	"github.com/streamwal/streamwal/utility/backoff"
)

// Two walnode processes with -authz: a writer's token appends to every
// channel, a reader's is refused and reads them back; the coordinator
// works as before with authorization on: it assigns every channel and,
// when a node is killed, its failure detection (the liveness stream, open
// without credentials) moves the node's channels long before the lease
// would expire.
func TestAuthorizationProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two walnode processes")
	}
	const ttl = 30 * time.Second // a move within it was made by failure detection
	writer, writerHash, err := authz.NewToken(nil)
	require.NoError(t, err)
	reader, readerHash, err := authz.NewToken(nil)
	require.NoError(t, err)
	c := newE2ECluster(t, 0, ttl)
	policy := filepath.Join(c.dir, "policy.yaml")
	const policyText = `
roles:
  producer: [{actions: [append], channels: ["pch-*"]}]
  reader:   [{actions: [read], channels: ["*"]}]
principals:
  writer: {roles: [producer], tokens: [%s]}
  reader: {roles: [reader], tokens: [%s]}
`
	require.NoError(t, os.WriteFile(policy, fmt.Appendf(nil, policyText, writerHash, readerHash), 0o600))
	for i := 1; i <= 2; i++ {
		id := "n" + strconv.Itoa(i)
		c.nodes[id] = &child{id: id, log: filepath.Join(c.dir, id+".log"), args: []string{
			"-id", id, "-listen", "127.0.0.1:0", "-etcd", strings.Join(c.etcd, ","), "-kafka", strings.Join(c.brokers, ","),
			"-root", c.root, "-session-ttl", ttl.String(), "-data", filepath.Join(c.dir, id), "-shutdown-timeout", "10s",
			// The test's etcd is its own, reached by nothing else: its
			// authentication is TestEtcdGuardedByAuthz's subject.
			"-authz", policy, "-etcd-guarded-elsewhere",
		}}
		c.start(id)
	}
	snap := c.waitAssigned(6)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := func(token string) *client.Client {
		cl, err := client.New(ctx, client.Config{Etcd: c.ecli, Root: c.root, Token: token,
			Retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	w, r := as(writer), as(reader)
	for ch := range snap.Assignments {
		_, err := w.Append(ctx, ch, client.Message{Payload: []byte("w-" + ch)}, client.Options{})
		require.NoError(t, err, ch)
		_, err = r.Append(ctx, ch, client.Message{Payload: []byte("r-" + ch)}, client.Options{})
		require.True(t, errors.Is(err, client.ErrRefused), "%s: %v", ch, err)
		require.Contains(t, err.Error(), `principal "reader" may not append`)
	}

	// Kill a node that holds channels: they move at once, through the
	// liveness stream.
	snap, _ = c.view.Snapshot()
	victim := ""
	for _, a := range snap.Assignments {
		victim = a.Value.Node
	}
	var held []string
	for ch, a := range snap.Assignments {
		if a.Value.Node == victim {
			held = append(held, ch)
		}
	}
	killed := time.Now()
	c.stop(victim, syscall.SIGKILL)
	moved, err := c.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		for _, a := range s.Assignments {
			if a.Value.Node == victim || a.Value.State != cluster.Assigned {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.Less(t, time.Since(killed), ttl, "moved by failure detection, not by the lease")
	for _, ch := range held {
		require.False(t, moved.Assignments[ch].Value.Detected.IsZero(), "%s moved by failure detection", ch)
	}

	for ch := range moved.Assignments {
		var got []string
		require.NoError(t, r.Read(ctx, ch, client.ReadOptions{UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
			got = append(got, string(d.GetPayload()))
			return nil
		}))
		require.Equal(t, []string{"w-" + ch}, got, ch)
	}

	// SIGHUP reloads the policy. A file that does not load leaves the
	// policy in force; one without the writer's token revokes it.
	var live []*child
	for _, ch := range c.nodes {
		if ch.cmd != nil {
			live = append(live, ch)
		}
	}
	reload := func(text string) {
		require.NoError(t, os.WriteFile(policy, []byte(text), 0o600))
		for _, ch := range live {
			require.NoError(t, ch.cmd.Process.Signal(syscall.SIGHUP))
		}
	}
	reload("principals: {writer: {roles: [producer], tokens: [" + writer + "]}}\n")
	for _, ch := range live {
		require.Eventually(t, func() bool {
			data, _ := os.ReadFile(ch.log)
			return strings.Contains(string(data), "policy not reloaded")
		}, time.Minute, 20*time.Millisecond, "%s never refused the bad policy", ch.id)
		data, _ := os.ReadFile(ch.log)
		require.NotContains(t, string(data), writer, "the token in the file is not logged")
	}
	for ch := range moved.Assignments {
		_, err := w.Append(ctx, ch, client.Message{Payload: []byte("still")}, client.Options{})
		require.NoError(t, err, "%s: the previous policy stays in force", ch)
	}
	reload(fmt.Sprintf(policyText, authz.HashToken("someone else"), readerHash))
	for ch := range moved.Assignments {
		require.Eventually(t, func() bool {
			_, err := w.Append(ctx, ch, client.Message{Payload: []byte("revoked")}, client.Options{})
			return errors.Is(err, client.ErrRefused)
		}, time.Minute, 20*time.Millisecond, "%s: the revoked token still appends", ch)
		_, err := w.Append(ctx, ch, client.Message{Payload: []byte("after")}, client.Options{})
		require.True(t, errors.Is(err, client.ErrRefused), "%s: %v", ch, err)
		var got []string
		require.NoError(t, r.Read(ctx, ch, client.ReadOptions{UntilCaughtUp: true}, func(d *streamwalv1.Delivered) error {
			got = append(got, string(d.GetPayload()))
			return nil
		}))
		require.Equal(t, "w-"+ch, got[0])
		require.NotContains(t, got, "after", "%s: a refused append stored nothing", ch)
	}
}
