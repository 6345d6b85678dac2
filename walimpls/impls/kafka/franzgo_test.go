package kafka

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"go.uber.org/atomic"
)

// The tests in this file keep the franz-go workarounds from outliving the
// bugs they work around (see the package doc, section Appends):
// txnWriter.commitOpenTxn (a commit that writes no EndTxn) and
// pre890p2Versions (a commit turned into an abort on the KIP-890 part 2
// path). Each runs the scenario the bug was seen in with a raw franz-go
// client, without the workaround, against kfake.
//
// Neither bug reproduces on demand: both were seen only under load, and a
// kfake run of the scenarios below does not show them (none in 300 fresh
// clients, 8 at a time, with the pin and without; none in 40 each with
// injected AddPartitionsToTxn errors and dropped produce or
// AddPartitionsToTxn connections; the writer's workaround never fired in a
// logged run of this package's tests). A test asserting "seen at least once in N tries" would
// therefore fail on the version that has the bugs. So each test asserts:
//
//   - the deterministic precondition of the workaround (for the pin: that
//     franz-go opts into KIP-890 part 2 without it, and stays off it with
//     it), failing when the workaround has stopped doing anything;
//   - the franz-go version: the workarounds were written against
//     franzGoWithWorkaroundBugs. On any other version the test fails unless
//     its scenario reproduced the bug on that run, so an upgrade cannot pass
//     without someone checking whether the bug is fixed, and then either
//     removing the workaround or moving the version here.

// franzGoWithWorkaroundBugs is the franz-go version the EndTxn skip and the
// KIP-890 part 2 lost commit were seen with.
const franzGoWithWorkaroundBugs = "v1.22.3"

// franzGoTries is the number of fresh transactional clients a scenario runs:
// enough to catch a bug that shows up often, few enough to stay within a
// couple of seconds under -race.
const franzGoTries = 40

// franzGoVersion returns the franz-go version the module builds with, from
// its go.mod (test binaries carry no dependency versions in their build
// info).
func franzGoVersion(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the package")
		dir = parent
	}
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	var version string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) > 0 && f[0] == "replace" {
			require.NotContains(t, line, "github.com/twmb/franz-go ", "franz-go is replaced in go.mod: check the workarounds against the replacement by hand")
		}
		if len(f) >= 2 && f[0] == "github.com/twmb/franz-go" {
			version = f[1]
		}
	}
	require.NotEmpty(t, version, "github.com/twmb/franz-go is not required in %s", filepath.Join(dir, "go.mod"))
	return version
}

// franzGoTxnRun is what one fresh transactional client did in a scenario.
type franzGoTxnRun struct {
	endTxnWrites int64   // EndTxn requests the client wrote (kgo hook)
	commits      []bool  // the Commit flag of each EndTxn the broker got
	produceVers  []int16 // the versions of its transactional produce requests
	addParts     int     // AddPartitionsToTxn requests the broker got
}

// franzGoTxnProbe watches a kfake cluster's transactional requests, per
// transactional id.
type franzGoTxnProbe struct {
	mu   sync.Mutex
	runs map[string]*franzGoTxnRun
}

func newFranzGoTxnProbe(c *kfake.Cluster) *franzGoTxnProbe {
	p := &franzGoTxnProbe{runs: map[string]*franzGoTxnRun{}}
	// Observe only: returning false lets kfake answer as usual.
	c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.EndTxnRequest)
		p.with(req.TransactionalID, func(run *franzGoTxnRun) { run.commits = append(run.commits, req.Commit) })
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.AddPartitionsToTxnRequest)
		p.with(req.TransactionalID, func(run *franzGoTxnRun) { run.addParts++ })
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		if req.TransactionID != nil {
			p.with(*req.TransactionID, func(run *franzGoTxnRun) { run.produceVers = append(run.produceVers, req.Version) })
		}
		return nil, nil, false
	})
	return p
}

func (p *franzGoTxnProbe) with(id string, fn func(*franzGoTxnRun)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	run := p.runs[id]
	if run == nil {
		run = &franzGoTxnRun{}
		p.runs[id] = run
	}
	fn(run)
}

func (p *franzGoTxnProbe) get(id string) franzGoTxnRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	if run := p.runs[id]; run != nil {
		return *run
	}
	return franzGoTxnRun{}
}

// franzGoFirstCommit runs the scenario both bugs were seen in, with a raw
// franz-go client and none of the writer's workarounds: a fresh
// transactional client (versions capped by maxVersions, or franz-go's
// defaults when nil) initialises its producer id, produces one record to
// the log partition of topic in its first transaction and commits it with
// EndTransaction(TryCommit), which must succeed. It returns what the client
// and the broker saw.
func franzGoFirstCommit(t *testing.T, c *kfake.Cluster, p *franzGoTxnProbe, topic, id string, maxVersions *kversion.Versions) franzGoTxnRun {
	t.Helper()
	var endTxn atomic.Int64
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.MetadataMinAge(10 * time.Millisecond),
		kgo.WithHooks(countEndTxn{&endTxn}),
	}
	if maxVersions != nil {
		opts = append(opts, kgo.MaxVersions(maxVersions))
	}
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = cl.ProducerID(ctx)
	require.NoError(t, err)
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: logPartition, Value: []byte(id)}).FirstErr())
	require.NoError(t, cl.EndTransaction(ctx, kgo.TryCommit))
	run := p.get(id)
	run.endTxnWrites = endTxn.Load()
	return run
}

// TestFranzGoSkipsEndTxn guards txnWriter.commitOpenTxn: franz-go
// v1.22.3 sometimes returned nil from the first EndTransaction(TryCommit) of
// a fresh client, on the pre-KIP-890-part-2 path the writer uses, without
// writing an EndTxn request.
func TestFranzGoSkipsEndTxn(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(2, "franzgo-skip"))
	p := newFranzGoTxnProbe(c)
	version := franzGoVersion(t)
	skipped := 0
	for i := range franzGoTries {
		run := franzGoFirstCommit(t, c, p, "franzgo-skip", fmt.Sprintf("franzgo-skip-%d", i), pre890p2Versions())
		if run.endTxnWrites == 0 {
			skipped++
		}
		// The path commitOpenTxn is written for: the partition joins the
		// transaction through AddPartitionsToTxn, and the commit is an
		// EndTxn of its own, which the hook counts.
		require.Positive(t, run.addParts, "client %d: no AddPartitionsToTxn on the pinned path", i)
		require.LessOrEqual(t, len(run.commits), 1, "client %d: EndTxn requests %v", i, run.commits)
		require.Equal(t, int64(len(run.commits)), run.endTxnWrites, "client %d: the kgo hook and the broker disagree on the EndTxn requests", i)
	}
	t.Logf("franz-go %s: %d of %d fresh clients committed without writing EndTxn", version, skipped, franzGoTries)
	if v := version; v != franzGoWithWorkaroundBugs && skipped == 0 {
		require.FailNowf(t, "franz-go upgraded",
			"franz-go %s (the EndTxn skip was seen with %s) did not skip an EndTxn in %d fresh clients here, and the skip does not reproduce on demand: "+
				"if %s no longer skips the EndTxn of a first commit, remove txnWriter.commitOpenTxn and countEndTxn "+
				"(doc.go, section Appends); if it still does, set franzGoWithWorkaroundBugs to %s",
			v, franzGoWithWorkaroundBugs, franzGoTries, v, v)
	}
}

// TestFranzGoKIP890p2LosesCommit guards pre890p2Versions: on the KIP-890
// part 2 path franz-go v1.22.3 sometimes ended the first transaction of a
// fresh client with an abort ("no produce succeeded in this transaction")
// while EndTransaction(TryCommit) returned nil.
func TestFranzGoKIP890p2LosesCommit(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(2, "franzgo-890p2"))
	p := newFranzGoTxnProbe(c)
	version := franzGoVersion(t)
	aborted := 0
	for i := range franzGoTries {
		run := franzGoFirstCommit(t, c, p, "franzgo-890p2", fmt.Sprintf("franzgo-890p2-%d", i), nil)
		if len(run.commits) == 1 && !run.commits[0] {
			aborted++
		}
		// Without the pin franz-go takes the part 2 path against kfake
		// (Produce v12 and up, no AddPartitionsToTxn): if it no longer
		// did, the pin would be doing nothing.
		require.NotEmpty(t, run.produceVers, "client %d: no transactional produce reached the broker", i)
		for _, v := range run.produceVers {
			require.GreaterOrEqualf(t, v, int16(12), "client %d: franz-go %s no longer uses KIP-890 part 2 by default: pre890p2Versions has nothing left to avoid (doc.go, section Appends)", i, version)
		}
		require.Zerof(t, run.addParts, "client %d: AddPartitionsToTxn on the KIP-890 part 2 path", i)
	}
	// With the pin, the same client stays on the old path.
	pinned := franzGoFirstCommit(t, c, p, "franzgo-890p2", "franzgo-890p2-pinned", pre890p2Versions())
	require.NotEmpty(t, pinned.produceVers)
	for _, v := range pinned.produceVers {
		require.LessOrEqual(t, v, int16(11), "pre890p2Versions no longer keeps produce below v12")
	}
	require.Positive(t, pinned.addParts, "pre890p2Versions no longer makes franz-go send AddPartitionsToTxn")

	t.Logf("franz-go %s: %d of %d fresh clients on the KIP-890 part 2 path turned their commit into an abort", version, aborted, franzGoTries)
	if v := version; v != franzGoWithWorkaroundBugs && aborted == 0 {
		require.FailNowf(t, "franz-go upgraded",
			"franz-go %s (the lost commit was seen with %s) did not turn a commit into an abort in %d fresh clients here, and the bug does not reproduce on demand: "+
				"if %s no longer loses the first commit of a fresh client on the KIP-890 part 2 path, remove pre890p2Versions and its MaxVersions option "+
				"(doc.go, section Appends); if it still does, set franzGoWithWorkaroundBugs to %s",
			v, franzGoWithWorkaroundBugs, franzGoTries, v, v)
	}
}
