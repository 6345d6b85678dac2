package pool_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/meta/etcdstore"
	"github.com/streamwal/streamwal/pool"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
)

// The environment of TestProcessChild.
const (
	childEnv        = "POOL_TEST_CHILD"
	childEtcdEnv    = "POOL_TEST_ETCD"
	childPrefixEnv  = "POOL_TEST_PREFIX"
	childBrokersEnv = "POOL_TEST_BROKERS"
)

// Two processes initialise one pool at once on one etcd and one Kafka, and
// allocate the same vchannels: one pool, one topic per pchannel, and both
// processes agree on every allocation.
func TestTwoProcessesInitialiseOnePool(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	_, kc := kafkaOpener(t)
	prefix := etcdtest.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range 2 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestProcessChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=1", childEtcdEnv+"="+srv.Endpoints()[0],
			childPrefixEnv+"="+prefix, childBrokersEnv+"="+strings.Join(kc.ListenAddrs(), ","))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	var results []map[string]string
	for i, cmd := range cmds {
		require.NoErrorf(t, cmd.Wait(), "child %d:\n%s", i, outs[i])
		var got map[string]string
		line := ""
		for _, l := range strings.Split(outs[i].String(), "\n") {
			if strings.HasPrefix(l, "ALLOCATIONS ") {
				line = strings.TrimPrefix(l, "ALLOCATIONS ")
			}
		}
		require.NoErrorf(t, json.Unmarshal([]byte(line), &got), "child %d:\n%s", i, outs[i])
		results = append(results, got)
	}
	require.Len(t, results[0], 50)
	require.Equal(t, results[0], results[1], "the two processes disagree on allocations")

	adm := kadm.NewClient(kafkaClient(t, kc.ListenAddrs()))
	topics, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	n := 0
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, kafka.DefaultTopicPrefix+"proc-") {
			n++
		}
	}
	require.Equal(t, 5, n, "topics: %v", topics.Names())
}

// TestProcessChild is one process of TestTwoProcessesInitialiseOnePool.
func TestProcessChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("child process of TestTwoProcessesInitialiseOnePool")
	}
	ctx := testCtx(t)
	cli := etcdtest.Client(t, []string{os.Getenv(childEtcdEnv)})
	s, err := etcdstore.New(cli, etcdstore.Options{Prefix: os.Getenv(childPrefixEnv)})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	o, err := kafka.New(ctx, kafka.Config{SeedBrokers: strings.Split(os.Getenv(childBrokersEnv), ","),
		MetadataMinAge: 10 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, CreateTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	p, err := pool.Open(ctx, s, pool.Backend{Name: "kafka", Opener: o}, pool.Config{Size: 5, Prefix: "proc-"}, pool.Options{})
	require.NoError(t, err)
	defer func() { _ = p.Close() }()
	as, err := p.Allocate(ctx, names("pv-", 0, 50)...)
	require.NoError(t, err)
	b, err := json.Marshal(allocations(t, as))
	require.NoError(t, err)
	os.Stdout.WriteString("ALLOCATIONS " + string(b) + "\n")
}
