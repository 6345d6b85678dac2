package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	streamwalv1 "github.com/streamwal/streamwal/api/streamwal/v1"
	"github.com/streamwal/streamwal/api/streamwal/v1/streamwalv1connect"
	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/client"
	"github.com/streamwal/streamwal/cluster"
	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/etcdtest"
	"github.com/streamwal/streamwal/internal/testseed"
	"github.com/streamwal/streamwal/utility/backoff"
)

// The two Kafka entries of a release cluster, on one kfake broker, told
// apart by their topic prefixes: a migration between them seals and
// fences a segment across processes exactly as between two clusters.
const (
	entryA  = "kafka"
	entryB  = "kafka-b"
	prefixA = "streamwal-" // kafka.DefaultTopicPrefix
	prefixB = "b-"
)

// releaseConfig is the nodes' configuration file: both entries, a pool
// of pchannels, and retention rounds every second and 20 ms after a
// commit.
const releaseConfig = `backends:
  %[1]s:
    seedBrokers: [%[3]s]
    metadataMinAge: 100ms
  %[2]s:
    kind: kafka
    seedBrokers: [%[3]s]
    topicPrefix: %[4]s
    metadataMinAge: 100ms
default: %[1]s
pool:
  size: %[5]d
  prefix: pch-
retention:
  interval: 1s
  commitDelay: 20ms
`

// releaseEnv is a walnode cluster whose nodes read releaseConfig, with
// what the release tests look at beside it: the broker's admin API, the
// chains, and a raw API client for Commit and Checkpoints. When a test
// fails, STREAMWAL_E2E_LOGS=<dir> keeps the nodes' whole logs there.
type releaseEnv struct {
	*e2eCluster
	kc     *kgo.Client
	adm    *kadm.Client
	chains *chain.Store
	http   *http.Client
	// base is each node's flags, without -crash-after.
	base map[string][]string
}

func newReleaseEnv(t *testing.T, nodes, channels int, ttl time.Duration) *releaseEnv {
	srv := etcdtest.Start(t)
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(t, err)
	t.Cleanup(broker.Close)
	c := &e2eCluster{t: t, root: etcdtest.Prefix(t) + "cluster/", etcd: srv.Endpoints(), brokers: broker.ListenAddrs(),
		dir: t.TempDir(), nodes: map[string]*child{}}
	cfg := filepath.Join(c.dir, "walnode.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(releaseConfig, entryA, entryB, strings.Join(c.brokers, ", "), prefixB, channels)), 0o644))
	e := &releaseEnv{e2eCluster: c, base: map[string][]string{}}
	for i := 1; i <= nodes; i++ {
		id := "n" + strconv.Itoa(i)
		e.base[id] = []string{
			"-id", id, "-listen", "127.0.0.1:0", "-etcd", strings.Join(c.etcd, ","), "-config", cfg,
			"-root", c.root, "-session-ttl", ttl.String(), "-data", filepath.Join(c.dir, id), "-shutdown-timeout", "10s",
			"-log-level", "debug",
		}
		c.nodes[id] = &child{id: id, log: filepath.Join(c.dir, id+".log"), args: slices.Clone(e.base[id])}
		c.start(id)
	}
	c.ecli = etcdtest.Client(t, c.etcd)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.cli, err = client.New(ctx, client.Config{Etcd: c.ecli, Root: c.root, Retry: backoff.Config{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(c.cli.Close)
	c.view = c.cli.View()
	t.Cleanup(func() {
		for id := range c.nodes {
			c.stop(id, syscall.SIGTERM)
		}
		// The nodes are this test binary, built with -race or not: a race
		// one of them reported fails the test (the process's exit status
		// says it only at its end, which a kill never reaches).
		for _, id := range slices.Sorted(maps.Keys(c.nodes)) {
			data, _ := os.ReadFile(c.nodes[id].log)
			if i := strings.Index(string(data), "WARNING: DATA RACE"); i >= 0 {
				t.Errorf("%s reported a data race:\n%s", id, string(data[i:min(len(data), i+6000)]))
			}
		}
		if t.Failed() {
			c.dumpLogs()
			// The whole logs, where STREAMWAL_E2E_LOGS says.
			if keep := os.Getenv("STREAMWAL_E2E_LOGS"); keep != "" {
				for id, ch := range c.nodes {
					data, _ := os.ReadFile(ch.log)
					_ = os.WriteFile(filepath.Join(keep, id+".log"), data, 0o644)
				}
			}
		}
	})
	// A short metadata age: kadm's offsets and topics come from the
	// client's metadata cache.
	kc, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.MetadataMinAge(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	e.kc, e.adm = kc, kadm.NewClient(kc)
	e.chains = c.chains()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	e.http = &http.Client{Transport: tr}
	return e
}

// topicOf is the Kafka topic of a segment.
func topicOf(s chain.Segment) string {
	prefix := prefixA
	if s.Backend.Name == entryB {
		prefix = prefixB
	}
	return prefix + s.Backend.Channel
}

// channelTopics returns, of the broker's topics, those that hold a
// segment of channel, by segment index.
func channelTopics(topics []string, channel string) map[uint64]string {
	out := map[uint64]string{}
	for _, name := range topics {
		var rest string
		switch {
		case strings.HasPrefix(name, prefixA):
			rest = strings.TrimPrefix(name, prefixA)
		case strings.HasPrefix(name, prefixB):
			rest = strings.TrimPrefix(name, prefixB)
		default:
			continue
		}
		if rest == channel {
			out[0] = name
			continue
		}
		if idx, ok := strings.CutPrefix(rest, channel+"-s"); ok {
			if i, err := strconv.ParseUint(idx, 10, 64); err == nil {
				out[i] = name
			}
		}
	}
	return out
}

// topics lists the broker's topics, as the broker has them now (kadm's
// ListTopics answers from the client's metadata cache, which keeps a
// deleted topic for up to its MetadataMinAge).
func (e *releaseEnv) topics(ctx context.Context) []string {
	out, err := e.listTopics(ctx)
	require.NoError(e.t, err)
	return out
}

func (e *releaseEnv) listTopics(ctx context.Context) ([]string, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, e.kc)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, tp := range resp.Topics {
		if tp.Topic != nil && tp.ErrorCode == 0 {
			out = append(out, *tp.Topic)
		}
	}
	slices.Sort(out)
	return out, nil
}

// toOwner calls the API of channel's owner, again (on a new owner, once
// the view changes) until it answers, final says its error is an answer,
// or ctx ends.
func toOwner[T any](ctx context.Context, e *releaseEnv, channel string, call func(streamwalv1connect.WALServiceClient) (T, error), final func(error) bool) (T, error) {
	for {
		s, changed := e.view.Snapshot()
		var err error
		if a, n, ok := s.Owner(channel); ok && a.State == cluster.Assigned {
			var out T
			if out, err = call(streamwalv1connect.NewWALServiceClient(e.http, "http://"+n.Addr)); err == nil || final(err) {
				return out, err
			}
		}
		// The owner changes, or it finishes its open: a short tick, as
		// the client's own backoff does, for the latter.
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		}
	}
}

// refusal returns a Commit's CommitRefused detail, or nil.
func refusal(err error) *streamwalv1.CommitRefused {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if r, ok := v.(*streamwalv1.CommitRefused); ok {
				return r
			}
		}
	}
	return nil
}

// commit commits cp for consumer cons of channel through its owner: the
// checkpoint stored, or the owner's refusal. A refusal for a stale term
// (a newer owner stored the checkpoint) is tried again on the new owner.
func (e *releaseEnv) commit(ctx context.Context, channel string, cons relConsumer, cp string) (*streamwalv1.ConsumerCheckpoint, *streamwalv1.CommitRefused, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := toOwner(ctx, e, channel, func(api streamwalv1connect.WALServiceClient) (*connect.Response[streamwalv1.CommitResponse], error) {
		return api.Commit(ctx, connect.NewRequest(&streamwalv1.CommitRequest{Channel: channel, Consumer: cons.name, Vchannel: cons.vchannel, Checkpoint: cp}))
	}, func(err error) bool {
		r := refusal(err)
		return r != nil && r.GetReason() != "stale_term"
	})
	if r := refusal(err); r != nil {
		return nil, r, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return res.Msg.GetCommitted(), nil, nil
}

// checkpoints returns channel's consumers and retention, from its owner.
func (e *releaseEnv) checkpoints(ctx context.Context, channel string) *streamwalv1.CheckpointsResponse {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := toOwner(ctx, e, channel, func(api streamwalv1connect.WALServiceClient) (*connect.Response[streamwalv1.CheckpointsResponse], error) {
		return api.Checkpoints(ctx, connect.NewRequest(&streamwalv1.CheckpointsRequest{Channel: channel}))
	}, func(error) bool { return false })
	require.NoError(e.t, err, "checkpoints of %s", channel)
	return res.Msg
}

// waitRegistered waits until node registered after revision before; its
// process ending first fails the test.
func (e *releaseEnv) waitRegistered(ctx context.Context, node string, before int64) {
	done := e.nodes[node].done
	for {
		s, changed := e.view.Snapshot()
		if n, ok := s.Nodes[node]; ok && n.Revision > before {
			return
		}
		select {
		case <-changed:
		case <-done:
			require.FailNowf(e.t, "exited", "%s exited before it registered (flags %v)", node, e.nodes[node].args)
		case <-ctx.Done():
			require.FailNowf(e.t, "not registered", "%s never registered again: %v", node, ctx.Err())
		}
	}
}

// waitServed waits until every channel of terms (channel → a term it
// had) is assigned above that term, on a live node but not, when set,
// on avoid, and confirmed.
func (e *releaseEnv) waitServed(ctx context.Context, terms map[string]int64, avoid string) {
	_, err := e.view.WaitFor(ctx, func(s cluster.Snapshot) bool {
		for ch, term := range terms {
			a, _, live := s.Owner(ch)
			if !live || a.Term <= term || a.State != cluster.Assigned || (avoid != "" && a.Node == avoid) {
				return false
			}
		}
		return true
	})
	require.NoError(e.t, err, "channels %v never served again", terms)
}

// kill9 kills node (SIGKILL), waits until its channels are served
// elsewhere at higher terms, and restarts it with its base flags.
func (e *releaseEnv) kill9(ctx context.Context, node string) {
	s, _ := e.view.Snapshot()
	lost := map[string]int64{}
	for ch, a := range s.Assignments {
		if a.Value.Node == node {
			lost[ch] = a.Value.Term
		}
	}
	before := s.Nodes[node].Revision
	e.stop(node, syscall.SIGKILL)
	e.waitServed(ctx, lost, node)
	e.nodes[node].args = slices.Clone(e.base[node])
	e.start(node)
	e.waitRegistered(ctx, node, before)
}

// moveTo moves channel to node with a planned move and waits until node
// serves it, or until node's process ended (it returns false then).
func (e *releaseEnv) moveTo(ctx context.Context, channel, node string) bool {
	layout, err := cluster.NewLayout(e.root)
	require.NoError(e.t, err)
	_, err = e.ecli.Put(ctx, layout.Move(channel), string(cluster.Encode(cluster.MoveRequest{To: node})))
	require.NoError(e.t, err)
	done := e.nodes[node].done
	for {
		s, changed := e.view.Snapshot()
		if a := s.Assignments[channel].Value; a.Node == node && a.State == cluster.Assigned {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		case <-ctx.Done():
			require.FailNowf(e.t, "never moved", "%s never moved to %s: %v", channel, node, ctx.Err())
		}
	}
}

// ttOf is a checkpoint's timetick ("<timetick>@<position>"); 0 for "".
func ttOf(t *testing.T, cp string) uint64 {
	tt, err := parseTT(cp)
	require.NoError(t, err)
	return tt
}

func parseTT(cp string) (uint64, error) {
	if cp == "" {
		return 0, nil
	}
	s, _, ok := strings.Cut(cp, "@")
	if !ok {
		return 0, fmt.Errorf("checkpoint %q: no @", cp)
	}
	tt, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("checkpoint %q: %w", cp, err)
	}
	return tt, nil
}

// segmentOf is the chain segment an ID or position names ("s<k>/..." or
// a bare ID of segment 0).
func segmentOf(t *testing.T, id string) uint64 {
	if _, pos, ok := strings.Cut(id, "@"); ok {
		id = pos
	}
	p, err := cursor.ParsePosition(id)
	require.NoError(t, err, "position %q", id)
	return p.Segment
}

// relConsumer is a named consumer of a channel, or of one vchannel of it.
type relConsumer struct{ name, vchannel string }

func (c relConsumer) String() string {
	if c.vchannel == "" {
		return c.name
	}
	return c.name + "/" + c.vchannel
}

// The consumers of every channel: two of the whole channel, one of a busy
// vchannel, one of a vchannel that goes quiet for long stretches (so that
// the owner moves it past the truncation, see consumers.Store.Advance).
var relConsumers = []relConsumer{{"flusher", ""}, {"indexer", ""}, {"v0-sink", "v0"}, {"v1-sink", "v1"}}

// relAck is an acknowledged append.
type relAck struct {
	seq      int
	payload  string
	vchannel string
	tt       uint64
	id       string
}

// relChannel is what a history knows of one channel.
type relChannel struct {
	name string

	mu   sync.Mutex
	acks []relAck // in order: one sequential appender
	// cps are the checkpoints of acknowledged appends, by payload, learned
	// from reads.
	cps map[string]string
	// goneTT: a read after a checkpoint of this timetick was refused with
	// OutOfRange; every read after an earlier one must be too.
	goneTT uint64
}

func (c *relChannel) snapshot() []relAck {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.acks)
}

// appender appends to the channel through the client, one message at a
// time, until stop: payloads <channel>-<seq>, some in vchannel v0, some in
// v1 while it is active (it switches every 64 appends), the rest in none.
func (c *relChannel) appender(cli *client.Client, r *rand.Rand, stop <-chan struct{}, pace time.Duration, fails chan<- error) {
	v1 := false
	for i := 0; ; i++ {
		if i%64 == 0 {
			v1 = r.IntN(2) == 0
		}
		vch := ""
		switch n := r.IntN(10); {
		case n < 4:
			vch = "v0"
		case n < 6 && v1:
			vch = "v1"
		}
		p := fmt.Sprintf("%s-%06d", c.name, i)
		// Never cancelled by stop: each append ends acknowledged, so the
		// history has no append of unknown outcome.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		res, err := cli.Append(ctx, c.name, client.Message{Payload: []byte(p), VChannel: vch}, client.Options{Key: p})
		cancel()
		if err != nil {
			fails <- fmt.Errorf("append %s: %w", p, err)
			return
		}
		c.mu.Lock()
		c.acks = append(c.acks, relAck{seq: i, payload: p, vchannel: vch, tt: res.TimeTick, id: res.ID})
		c.mu.Unlock()
		// The appenders' rate: a duration the test means.
		select {
		case <-stop:
			return
		case <-time.After(pace):
		}
	}
}

// history drives a random history of a release cluster and checks it.
type history struct {
	t     *testing.T
	e     *releaseEnv
	ctx   context.Context
	r     *rand.Rand
	names []string
	chans map[string]*relChannel
	// committed is, per channel and consumer, the highest timetick of a
	// checkpoint a commit returned.
	committed map[string]map[relConsumer]uint64
	// segTopics remembers the topic of every segment seen in a chain, and
	// gone the topics of segments seen dropped: they never come back.
	segTopics map[string]map[uint64]string
	gone      map[string]bool
	steps     map[string]int
}

var errEnough = errors.New("enough read")

// read reads channel after the checkpoint after (from the first message
// kept when empty), vchannel vch only when set, until caught up or, when
// limit > 0, limit messages; it learns the checkpoints of what it read.
func (h *history) read(channel, after, vch string, limit int) ([]*streamwalv1.Delivered, error) {
	ctx, cancel := context.WithTimeout(h.ctx, 90*time.Second)
	defer cancel()
	opts := client.ReadOptions{After: after, UntilCaughtUp: true}
	if vch != "" {
		opts.VChannels = []string{vch}
	}
	var got []*streamwalv1.Delivered
	err := h.e.cli.Read(ctx, channel, opts, func(d *streamwalv1.Delivered) error {
		got = append(got, d)
		if limit > 0 && len(got) >= limit {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	c := h.chans[channel]
	c.mu.Lock()
	for _, d := range got {
		c.cps[string(d.GetPayload())] = d.GetCheckpoint()
	}
	c.mu.Unlock()
	return got, err
}

func outOfRange(err error) bool { return err != nil && connect.CodeOf(err) == connect.CodeOutOfRange }

// verifyRead checks what a read after a checkpoint of timetick afterTT
// delivered against acks, the acknowledged appends when it started:
// exactly those after afterTT (of vch when set), once, in order, as a
// prefix when the read stopped early, all of them when it caught up; and
// past them only later appends, in order.
func (h *history) verifyRead(what string, afterTT uint64, vch string, got []*streamwalv1.Delivered, acks []relAck, caughtUp bool) {
	t := h.t
	var want []relAck
	for _, a := range acks {
		if a.tt > afterTT && (vch == "" || a.vchannel == vch) {
			want = append(want, a)
		}
	}
	last := -1
	for i, d := range got {
		p := string(d.GetPayload())
		if i < len(want) {
			require.Equalf(t, want[i].payload, p, "%s: delivered #%d (after timetick %d): %d wanted, %d delivered", what, i, afterTT, len(want), len(got))
			require.Equalf(t, want[i].tt, d.GetTimetick(), "%s: %s's timetick", what, p)
		}
		seq, err := strconv.Atoi(p[strings.LastIndexByte(p, '-')+1:])
		require.NoError(t, err, "%s: payload %q", what, p)
		require.Greaterf(t, seq, last, "%s: %s delivered after %d: twice, or out of order", what, p, last)
		require.Truef(t, vch == "" || d.GetVchannel() == vch, "%s: %s of vchannel %q", what, p, d.GetVchannel())
		last = seq
	}
	if caughtUp && len(got) < len(want) {
		require.FailNowf(t, "lost", "%s: a read after timetick %d caught up after %d messages of the %d acknowledged before it: %s (timetick %d, id %s) is missing",
			what, afterTT, len(got), len(want), want[len(got)].payload, want[len(got)].tt, want[len(got)].id)
	}
}

// stored returns channel's consumers as its owner has them, and checks
// that no checkpoint went below what a commit returned.
func (h *history) stored(channel string) (map[relConsumer]*streamwalv1.ConsumerCheckpoint, *streamwalv1.Retention) {
	t := h.t
	res := h.e.checkpoints(h.ctx, channel)
	out := map[relConsumer]*streamwalv1.ConsumerCheckpoint{}
	for _, c := range res.GetConsumers() {
		k := relConsumer{c.GetConsumer(), c.GetVchannel()}
		out[k] = c
		tt := ttOf(t, c.GetCheckpoint())
		require.GreaterOrEqualf(t, tt, h.committed[channel][k], "%s, %s: the stored checkpoint %s went below one committed (timetick %d)",
			channel, k, c.GetCheckpoint(), h.committed[channel][k])
		require.GreaterOrEqualf(t, ttOf(t, c.GetResume()), tt, "%s, %s: resume %s before the checkpoint %s", channel, k, c.GetResume(), c.GetCheckpoint())
	}
	for k := range h.committed[channel] {
		require.Containsf(t, out, k, "%s: consumer %s is gone", channel, k)
	}
	return out, res.GetRetention()
}

// readFromResume reads what consumer cons of channel reads from where it
// resumes, up to limit messages (0: until caught up), and checks it: every
// acknowledged append after its checkpoint, once, in order. It returns
// the consumer as stored and what it read. A vchannel consumer may find
// the log truncated past its resume point when the owner moved it on
// meanwhile (it was idle, and holds nothing): it reads again from where
// it resumes now.
func (h *history) readFromResume(channel string, cons relConsumer, limit int) (*streamwalv1.ConsumerCheckpoint, []*streamwalv1.Delivered) {
	t := h.t
	for {
		cps, _ := h.stored(channel)
		st, ok := cps[cons]
		require.Truef(t, ok, "%s: no consumer %s", channel, cons)
		acks := h.chans[channel].snapshot()
		got, err := h.read(channel, st.GetResume(), cons.vchannel, limit)
		if outOfRange(err) && cons.vchannel != "" {
			again, _ := h.stored(channel)
			if ttOf(t, again[cons].GetResume()) > ttOf(t, st.GetResume()) {
				h.steps["moved under a read"]++
				continue
			}
		}
		if err != nil {
			h.dumpHistory(channel)
		}
		require.NoErrorf(t, err, "%s, %s: read after its resume point %s", channel, cons, st.GetResume())
		h.verifyRead(fmt.Sprintf("%s, %s from its resume point %s", channel, cons, st.GetResume()), ttOf(t, st.GetCheckpoint()), cons.vchannel, got, acks, limit == 0 || len(got) < limit)
		return st, got
	}
}

// commitAhead has consumer cons read from where it resumes, up to max
// messages (0: until caught up), checks what it read, and commits at the
// last one: false when it read nothing.
func (h *history) commitAhead(channel string, cons relConsumer, limit int) bool {
	t := h.t
	st, got := h.readFromResume(channel, cons, limit)
	if len(got) == 0 {
		return false
	}
	cp := got[len(got)-1].GetCheckpoint()
	res, refused, err := h.e.commit(h.ctx, channel, cons, cp)
	require.NoErrorf(t, err, "%s, %s: commit %s", channel, cons, cp)
	require.Nilf(t, refused, "%s, %s: a commit of %s, read after its resume point %s, was refused", channel, cons, cp, st.GetResume())
	require.Equal(t, cp, res.GetCheckpoint())
	h.committed[channel][cons] = max(h.committed[channel][cons], ttOf(t, cp))
	return true
}

// staleCommit commits a checkpoint the consumer read before its last
// commit (a restarted instance replaying): refused, and nothing changes.
func (h *history) staleCommit(channel string, cons relConsumer) {
	t := h.t
	c := h.chans[channel]
	top := h.committed[channel][cons]
	var old []string
	c.mu.Lock()
	for _, a := range c.acks {
		if cp, ok := c.cps[a.payload]; ok && a.tt < top && (cons.vchannel == "" || a.vchannel == cons.vchannel) {
			old = append(old, cp)
		}
	}
	c.mu.Unlock()
	if len(old) == 0 {
		return
	}
	cp := old[h.r.IntN(len(old))]
	_, refused, err := h.e.commit(h.ctx, channel, cons, cp)
	require.NoError(t, err)
	require.NotNilf(t, refused, "%s, %s: a commit of %s, before its committed timetick %d, was accepted", channel, cons, cp, top)
	require.Containsf(t, []string{"backwards", "truncated"}, refused.GetReason(), "%s, %s: refusal of %s", channel, cons, cp)
	cps, _ := h.stored(channel)
	require.Equalf(t, top, ttOf(t, cps[cons].GetCheckpoint()), "%s, %s: a refused commit changed the checkpoint", channel, cons)
}

// probe reads after an old checkpoint: either OutOfRange with nothing
// delivered (the log is truncated past it), or exactly what was appended
// after it; once refused, always refused; never refused at or after the
// slowest checkpoint of a consumer of the whole channel.
func (h *history) probe(channel string) {
	t := h.t
	c := h.chans[channel]
	acks := c.snapshot()
	c.mu.Lock()
	var known []relAck
	for _, a := range acks {
		if _, ok := c.cps[a.payload]; ok {
			known = append(known, a)
		}
	}
	c.mu.Unlock()
	if len(known) == 0 {
		return
	}
	// The consumers of the whole channel always hold the log (those of a
	// vchannel may be moved on at any round): nothing at or after the
	// slowest of them is ever truncated.
	cps, _ := h.stored(channel)
	slowest := uint64(0)
	for k, st := range cps {
		if tt := ttOf(t, st.GetResume()); k.vchannel == "" && (slowest == 0 || tt < slowest) {
			slowest = tt
		}
	}
	// The oldest read, anything before the slowest consumer (where the log
	// may be truncated), or anything.
	a := known[h.r.IntN(len(known))]
	i, _ := slices.BinarySearchFunc(known, slowest, func(a relAck, tt uint64) int { return cmpU(a.tt, tt) })
	switch n := h.r.IntN(3); {
	case n == 0:
		a = known[0]
	case n == 1 && i > 0:
		a = known[h.r.IntN(i)]
	}
	c.mu.Lock()
	cp, goneBefore := c.cps[a.payload], c.goneTT
	c.mu.Unlock()
	got, err := h.read(channel, cp, "", 30)
	what := fmt.Sprintf("%s: a read after %s (%s)", channel, cp, a.payload)
	switch {
	case outOfRange(err):
		require.Lessf(t, a.tt, slowest, "%s: refused, at or after the slowest consumer's resume point (timetick %d): %v", what, slowest, err)
		h.verifyRead(what, a.tt, "", got, acks, false)
		gone := a.tt
		if len(got) > 0 {
			gone = got[len(got)-1].GetTimetick()
		}
		c.mu.Lock()
		c.goneTT = max(c.goneTT, gone)
		c.mu.Unlock()
		h.steps["probe refused"]++
	case err != nil:
		require.NoError(t, err, what)
	default:
		require.Greaterf(t, a.tt, goneBefore, "%s: delivered %d messages after a read after timetick %d was refused: deleted data came back", what, len(got), goneBefore)
		h.verifyRead(what, a.tt, "", got, acks, len(got) < 30)
		h.steps["probe read"]++
	}
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkAll checks every channel: every consumer reads everything after
// its checkpoint from where it resumes, checkpoints never went back, and
// no deleted segment's topic exists.
func (h *history) checkAll() {
	for _, ch := range h.names {
		for _, cons := range relConsumers {
			h.readFromResume(ch, cons, 0)
		}
	}
	h.checkTopics()
	h.steps["check"]++
}

// checkTopics reads every chain, then the broker's topics: the topic of a
// segment dropped from a chain is gone, and stays gone.
func (h *history) checkTopics() map[string]chain.Chain {
	t := h.t
	chains := map[string]chain.Chain{}
	for _, ch := range h.names {
		cur, err := h.e.chains.Get(h.ctx, ch)
		require.NoError(t, err)
		require.NoError(t, cur.Validate())
		chains[ch] = cur
		if h.segTopics[ch] == nil {
			h.segTopics[ch] = map[uint64]string{}
		}
		for _, s := range cur.Segments {
			h.segTopics[ch][s.Index] = topicOf(s)
		}
		for i, topic := range h.segTopics[ch] {
			if i < cur.First() {
				h.gone[topic] = true
			}
		}
	}
	topics := h.e.topics(h.ctx)
	for _, name := range topics {
		require.Falsef(t, h.gone[name], "the topic %s of a segment dropped from its chain exists (again)", name)
	}
	for _, ch := range h.names {
		for i, name := range channelTopics(topics, ch) {
			require.GreaterOrEqualf(t, i, chains[ch].First(), "%s: topic %s of segment %d, before the chain's first %d", ch, name, i, chains[ch].First())
		}
	}
	return chains
}

// migrate moves channel to the other Kafka entry.
func (h *history) migrate(channel string) {
	cur, err := h.e.chains.Get(h.ctx, channel)
	require.NoError(h.t, err)
	to := entryB
	if cur.Last().Backend.Name == entryB {
		to = entryA
	}
	h.e.migrate(h.ctx, channel, to)
	got := h.e.waitMigrated(h.ctx, h.e.chains, channel, to)
	h.t.Logf("%s migrated to %s: segments %d..%d", channel, to, got.First(), got.Last().Index)
}

// waitAck waits until the appender of channel had an append acknowledged
// in segment index or later.
func (h *history) waitAck(channel string, index uint64) {
	c := h.chans[channel]
	for {
		acks := c.snapshot()
		if len(acks) > 0 && segmentOf(h.t, acks[len(acks)-1].id) >= index {
			return
		}
		select {
		case <-h.ctx.Done():
			require.FailNowf(h.t, "no append", "%s: no append acknowledged in segment %d", channel, index)
		case <-time.After(10 * time.Millisecond): // the appender's next ack: polled
		}
	}
}

// crash restarts a channel's owner with -crash-after step, moves the
// channel to it, makes every consumer commit ahead so that its next round
// truncates (into the last segment, past the sealed ones), waits for the
// process to kill itself at step, and restarts it without the flag. For
// prune-deleted (the sealed segments' data deleted, the chain not yet
// updated) the channel gets a sealed segment first, and the next owner
// must finish the prune.
func (h *history) crash(channel, step string) {
	t, ctx := h.t, h.ctx
	cur, err := h.e.chains.Get(ctx, channel)
	require.NoError(t, err)
	if step == "prune-deleted" && len(cur.Segments) < 2 {
		h.migrate(channel)
		cur, err = h.e.chains.Get(ctx, channel)
		require.NoError(t, err)
	}
	// Something in the last segment to commit at, past the sealed ones.
	h.waitAck(channel, cur.Last().Index)

	s, _ := h.e.view.Snapshot()
	victim := s.Assignments[channel].Value.Node
	// A graceful stop (its channels move at once), a start armed.
	h.e.stop(victim, syscall.SIGTERM)
	h.e.nodes[victim].args = append(slices.Clone(h.e.base[victim]), "-crash-after", step)
	h.e.start(victim)
	h.e.waitRegistered(ctx, victim, s.Nodes[victim].Revision)
	died := h.e.nodes[victim].done
	if h.e.moveTo(ctx, channel, victim) {
		s, _ = h.e.view.Snapshot()
		term := s.Assignments[channel].Value.Term
		for _, cons := range relConsumers {
			h.commitAhead(channel, cons, 0)
		}
		select {
		case <-died:
		case <-time.After(60 * time.Second):
			require.FailNowf(t, "no crash", "%s (-crash-after %s) owns %s at term %d, its consumers committed ahead, and it never reached %s",
				victim, step, channel, term, step)
		}
	}
	<-died
	s, _ = h.e.view.Snapshot()
	lost := map[string]int64{}
	if a := s.Assignments[channel].Value; a.Node == victim {
		lost[channel] = a.Term
	}
	h.e.nodes[victim].cmd = nil
	h.e.nodes[victim].args = slices.Clone(h.e.base[victim])
	h.e.start(victim)
	h.e.waitRegistered(ctx, victim, s.Nodes[victim].Revision)
	h.e.waitServed(ctx, lost, "")
	after, err := h.e.chains.Get(ctx, channel)
	require.NoError(t, err)
	t.Logf("%s killed itself after %s of %s; the chain is at segments %d..%d", victim, step, channel, after.First(), after.Last().Index)
	if step == "prune-deleted" {
		// The next owner finishes what the killed one began: the sealed
		// segments whose data it deleted leave the chain.
		h.waitFirst(channel, cur.Last().Index, 30*time.Second)
	}
}

// waitFirst waits until channel's chain begins at segment index or later.
func (h *history) waitFirst(channel string, index uint64, within time.Duration) {
	ctx, cancel := context.WithTimeout(h.ctx, within)
	defer cancel()
	var cur chain.Chain
	var err error
	for {
		cur, err = h.e.chains.Get(ctx, channel)
		if err == nil && cur.First() >= index {
			return
		}
		select {
		case <-ctx.Done():
			cps, ret := h.stored(channel)
			require.FailNowf(h.t, "not pruned", "%s: the chain still begins at segment %d, not %d, %s after its consumers passed it (chain %+v, %v; consumers %v; retention %v)",
				channel, cur.First(), index, within, cur.Segments, err, cps, ret)
		case <-time.After(100 * time.Millisecond): // the chain is in etcd, which the view does not follow: polled
		}
	}
}

// TestReleaseHistories runs random histories of a three-node cluster whose
// channels are chains on two Kafka entries (one kfake broker), with
// consumers committing checkpoints and the owners releasing the log:
// appends through the client on every channel all along, commits by four
// named consumers per channel (two of the channel, two of a vchannel, at
// checkpoints they read), stale commits, reads from old checkpoints,
// failovers (SIGKILL of an owner), migrations between the entries, and an
// owner killed by its own -crash-after in a retention round (after the
// floor is recorded, after the truncation) and in a prune (after the
// sealed segments' data is deleted). It checks, after every failover,
// migration and crash and at random moments:
//
//   - no message at or after a committed checkpoint is lost: every
//     consumer's read from its stored resume point delivers every
//     acknowledged append after its checkpoint, once, in order;
//   - no checkpoint moves backwards: the stored one is never below what a
//     commit returned, and a stale commit is refused;
//   - nothing deleted comes back: a read after a checkpoint once refused
//     (OutOfRange) is always refused, and a segment's topic, once its
//     segment left the chain, never exists again;
//   - in the end, with every consumer committed at a last message, every
//     sealed segment is deleted (its topic gone, the chain down to its
//     last segment) and the log before that message is gone.
//
// The seed is logged (STREAMWAL_TEST_SEED replays the schedule; the
// processes' timing is the machine's). STREAMWAL_RELEASE_ROUNDS runs more
// rounds of the failovers, migrations and crashes (one by default).
func TestReleaseHistories(t *testing.T) {
	if testing.Short() {
		t.Skip("runs walnode processes through kills and migrations")
	}
	rounds := 1
	if v := os.Getenv("STREAMWAL_RELEASE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "STREAMWAL_RELEASE_ROUNDS")
		rounds = n
	}
	seed := testseed.Seed(t)
	start := time.Now()
	const channels = 3
	e := newReleaseEnv(t, 3, channels, time.Second)
	snap := e.waitAssigned(channels)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(3+2*rounds)*time.Minute)
	defer cancel()
	h := &history{t: t, e: e, ctx: ctx, r: rand.New(rand.NewPCG(seed, 0)), chans: map[string]*relChannel{},
		committed: map[string]map[relConsumer]uint64{}, segTopics: map[string]map[uint64]string{}, gone: map[string]bool{}, steps: map[string]int{}}
	h.names = slices.Sorted(maps.Keys(snap.Assignments))

	stop := make(chan struct{})
	fails := make(chan error, channels)
	var wg sync.WaitGroup
	for i, ch := range h.names {
		c := &relChannel{name: ch, cps: map[string]string{}}
		h.chans[ch], h.committed[ch] = c, map[relConsumer]uint64{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.appender(e.cli, rand.New(rand.NewPCG(seed, uint64(i+1))), stop, 15*time.Millisecond, fails)
		}()
	}
	stopped := false
	stopAppenders := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopAppenders()
	noFailure := func() {
		select {
		case err := <-fails:
			require.NoError(t, err)
		default:
		}
	}

	// Every consumer commits at the first message: from then on each
	// channel has consumers of the whole channel, which hold its log.
	for _, ch := range h.names {
		h.waitAck(ch, 0)
		got, err := h.read(ch, "", "", 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		for _, cons := range relConsumers {
			_, refused, err := e.commit(ctx, ch, cons, got[0].GetCheckpoint())
			require.NoError(t, err)
			require.Nil(t, refused, "%s, %s: the first commit", ch, cons)
			h.committed[ch][cons] = ttOf(t, got[0].GetCheckpoint())
		}
	}

	// The schedule: the heavy steps in a random order, light ones
	// between, a full check after each heavy one.
	var heavy []string
	for range rounds {
		heavy = append(heavy, "failover", "failover", "migrate", "migrate", "crash floor-recorded", "crash truncated", "crash prune-deleted")
	}
	h.r.Shuffle(len(heavy), func(i, j int) { heavy[i], heavy[j] = heavy[j], heavy[i] })
	pick := func() string { return h.names[h.r.IntN(len(h.names))] }
	light := func() {
		ch := pick()
		cons := relConsumers[h.r.IntN(len(relConsumers))]
		switch n := h.r.IntN(10); {
		case n < 6:
			if h.commitAhead(ch, cons, 1+h.r.IntN(80)) {
				h.steps["commit"]++
			}
		case n < 7:
			h.staleCommit(ch, cons)
			h.steps["stale commit"]++
		default:
			h.probe(ch)
		}
	}
	for _, step := range heavy {
		for range 2 + h.r.IntN(5) {
			light()
			noFailure()
		}
		ch := pick()
		kind, arg, _ := strings.Cut(step, " ")
		began := time.Now()
		switch kind {
		case "failover":
			s, _ := e.view.Snapshot()
			victim := s.Assignments[ch].Value.Node
			e.kill9(ctx, victim)
			t.Logf("failover: %s (owner of %s) killed and restarted in %s", victim, ch, time.Since(began).Round(time.Millisecond))
		case "migrate":
			h.migrate(ch)
		case "crash":
			h.crash(ch, arg)
		}
		h.steps[step]++
		noFailure()
		h.checkAll()
	}

	// The end: the appenders stop, a last message on every channel, and
	// every consumer commits at what it read last.
	stopAppenders()
	noFailure()
	markers := map[string]string{}
	for _, ch := range h.names {
		p := fmt.Sprintf("%s-%d", ch, 1<<30) // after every appender's
		res, err := e.cli.Append(ctx, ch, client.Message{Payload: []byte(p)}, client.Options{})
		require.NoError(t, err)
		markers[ch] = res.ID
		c := h.chans[ch]
		c.mu.Lock()
		c.acks = append(c.acks, relAck{seq: 1 << 30, payload: p, tt: res.TimeTick, id: res.ID})
		c.mu.Unlock()
	}
	h.checkAll()
	for _, ch := range h.names {
		for _, cons := range relConsumers {
			h.commitAhead(ch, cons, 0)
		}
	}
	// Every sealed segment is behind every checkpoint now: each is
	// deleted, its topic with it, and the chain is down to its last
	// segment, the only topic of the channel.
	for _, ch := range h.names {
		cur, err := e.chains.Get(ctx, ch)
		require.NoError(t, err)
		last := cur.Last()
		require.Equal(t, last.Index, segmentOf(t, markers[ch]), "%s: the last message is in the last segment", ch)
		h.waitFirst(ch, last.Index, 30*time.Second)
	}
	chains := h.checkTopics()
	topics := h.e.topics(ctx)
	for _, ch := range h.names {
		last := chains[ch].Last()
		require.Equal(t, map[uint64]string{last.Index: topicOf(last)}, channelTopics(topics, ch), "%s: the topics of its segments", ch)
		// The log before the last message is gone: a read after the
		// first message is refused.
		c := h.chans[ch]
		c.mu.Lock()
		first := c.cps[c.acks[0].payload]
		c.mu.Unlock()
		if first == "" {
			continue
		}
		got, err := h.read(ch, first, "", 1)
		require.Truef(t, outOfRange(err), "%s: a read after the first message, with every consumer at the last: %v, %d delivered", ch, err, len(got))
		require.Empty(t, got)
	}
	h.checkAll()

	var total int
	for _, c := range h.chans {
		total += len(c.acks)
	}
	t.Logf("seed %d: %d appends over %d channels, steps %v, in %s", seed, total, channels, h.steps, time.Since(start).Round(time.Second))
}

// dumpHistory logs, for a failure's message, every revision of channel's
// consumer records and floor in the store (etcd keeps them until it
// compacts).
func (h *history) dumpHistory(channel string) {
	prefix := strings.TrimSuffix(h.e.root, "/") + "-meta/checkpoints/" + channel + "/"
	resp, err := h.e.ecli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		h.t.Logf("dump: %v", err)
		return
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		rev := kv.ModRevision
		for rev > 0 {
			r, err := h.e.ecli.Get(context.Background(), key, clientv3.WithRev(rev))
			if err != nil || len(r.Kvs) == 0 {
				break
			}
			h.t.Logf("HIST %s @%d: %s", strings.TrimPrefix(key, prefix), r.Kvs[0].ModRevision, r.Kvs[0].Value)
			rev = r.Kvs[0].ModRevision - 1
		}
	}
}
