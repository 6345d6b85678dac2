// Command kafkainterop writes streamwal channels through the Kafka backend
// so that scripts/interop.sh can read them with Kafka clients other than
// franz-go, and has an external transactional producer fence a streamwal
// writer. It is a test tool for that script, not for production.
//
//	kafkainterop write -brokers 127.0.0.1:9092 -channel interop-log -term 1 -out /tmp/interop-x/log
//	kafkainterop fence -brokers 127.0.0.1:9092 -channel interop-fence -term 1 -out /tmp/interop-x/fence \
//	        -peer 'node fence.js'
//
// It opens the channel with the backend itself (walimpls, not the adaptor),
// so every record of partition 0 is one acknowledged append and nothing
// else: the adaptor's own messages (term begins, timeticks) are not written.
//
// write appends -records messages from -appenders goroutines, then -batches
// AppendBatch calls of -batch-size messages, then has another transactional
// id produce -aborted records into partition 0 and abort them, then appends
// one message more, so that the aborted records lie between committed ones.
// Payloads are "<channel>-<n>", except that the first is null and the
// second empty; every message has the properties interop.channel and
// interop.seq, and a few have an empty value or UTF-8 in one.
//
// fence appends one message, then runs -peer (through sh -c), a
// transactional producer that initialises the channel's transactional id
// (environment: INTEROP_BROKERS, INTEROP_TOPIC, INTEROP_TRANSACTIONAL_ID)
// and prints a line "initialised". The next streamwal append must fail with
// Kafka's epoch fence (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH). The peer
// writes no term claim, so streamwal's claim still wins: that append fails
// retryably, not with walimpls.ErrFenced, and the append after it must
// succeed on a producer the writer re-acquired, which fences the peer in
// turn. Then kafkainterop writes a line "go" to the peer's stdin; the peer
// must try to produce and commit, be refused for its epoch, print a line
// starting with "fenced" and exit 0.
//
// Both write -out PREFIX.tsv: what a read_committed consumer of partition 0
// must see, one line per record in offset order, as kcat prints it with
// -f '%o\t%S\t%s\t%h\n' (offset, payload size or -1 for a null value,
// payload, headers k=v joined by commas in key order). write also writes
// PREFIX.uncommitted.tsv, what a read_uncommitted consumer sees (the aborted
// records too). Both write PREFIX.env, shell assignments: TOPIC,
// TRANSACTIONAL_ID, CHANNEL_TERM, ACKED, ABORTED, LOG_END (partition 0's
// high watermark), CLAIMS_START and CLAIMS_END (partition 1's bounds).
// Payloads and properties are kept free of tabs, commas, '=' and newlines
// so that the lines stay unambiguous.
package main

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
)

const usage = `usage: kafkainterop write|fence [flags]; kafkainterop write -h for the flags`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "write":
		err = write(args)
	case "fence":
		err = fence(args)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkainterop %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// common are the flags of both commands.
type common struct {
	brokers string
	channel string
	term    int64
	out     string
	timeout time.Duration
	verbose bool
}

func (c *common) register(fs *flag.FlagSet, channel string) {
	fs.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "seed brokers host:port[,host:port]")
	fs.StringVar(&c.channel, "channel", channel, "channel to write")
	fs.Int64Var(&c.term, "term", 1, "term to open the channel at")
	fs.StringVar(&c.out, "out", "", "prefix of the files that say what readers must see (required)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "bound on the whole run")
	fs.BoolVar(&c.verbose, "v", false, "log what the backend does (its warnings are always logged)")
}

// session is an open channel and what was acknowledged on it.
type session struct {
	c      common
	cfg    kafka.Config
	opener *kafka.Opener
	wal    walimpls.WALImpl
	topic  string
	txnID  string

	mu    sync.Mutex
	acked []record
	last  message.ID
}

func (c common) open(ctx context.Context) (*session, error) {
	if c.out == "" {
		return nil, errors.New("-out is required")
	}
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// A created topic is waited for through metadata refreshes, which
	// franz-go spaces 5s apart by default: the broker is on loopback.
	cfg := kafka.Config{SeedBrokers: strings.Split(c.brokers, ","),
		MetadataMinAge: 100 * time.Millisecond, RetryBackoff: 50 * time.Millisecond}
	o, err := kafka.New(ctx, cfg, walimpls.WithLogger(logger))
	if err != nil {
		return nil, errors.Wrapf(err, "kafka backend at %s", c.brokers)
	}
	w, err := o.Open(ctx, walimpls.Channel{Name: c.channel, Term: c.term, Mode: walimpls.ReadWrite})
	if err != nil {
		_ = o.Close()
		return nil, errors.Wrapf(err, "open channel %s at term %d", c.channel, c.term)
	}
	// The names the backend derives, from its documented defaults: the
	// external clients are given these, so a change of the defaults
	// shows up here as well as in them.
	return &session{c: c, cfg: cfg, opener: o, wal: w,
		topic: kafka.DefaultTopicPrefix + c.channel, txnID: kafka.DefaultTransactionalIDPrefix + c.channel}, nil
}

func (s *session) close() { _ = s.opener.Close() }

// record is one record of partition 0 as a consumer sees it.
type record struct {
	offset  int64
	payload []byte // nil: a null value
	props   map[string]string
}

// line is the record as kcat prints it with -f '%o\t%S\t%s\t%h\n':
// offset, payload size (-1 for a null value), payload, headers.
func (r record) line() string {
	size := len(r.payload)
	if r.payload == nil {
		size = -1
	}
	hs := make([]string, 0, len(r.props))
	for _, k := range slices.Sorted(maps.Keys(r.props)) {
		hs = append(hs, k+"="+r.props[k])
	}
	return fmt.Sprintf("%d\t%d\t%s\t%s", r.offset, size, r.payload, strings.Join(hs, ","))
}

// add records an acknowledged append.
func (s *session) add(id message.ID, m message.Message) error {
	off, err := message.SeqOf(kafka.Name, id)
	if err != nil {
		return err
	}
	props := make(map[string]string, m.Properties().Len())
	for _, k := range m.Properties().Keys() {
		props[k], _ = m.Properties().Get(k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = append(s.acked, record{offset: off, payload: m.Payload(), props: props})
	if s.last.IsZero() || s.last.LT(id) {
		s.last = id
	}
	return nil
}

func (s *session) append(ctx context.Context, m message.Message) error {
	id, err := walimpls.Append(ctx, s.wal, m)
	if err != nil {
		return err
	}
	return s.add(id, m)
}

func (s *session) msg(seq string, payload []byte, extra map[string]string) message.Message {
	props := map[string]string{"interop.channel": s.c.channel, "interop.seq": seq}
	maps.Copy(props, extra)
	m, err := message.New(payload, props)
	if err != nil {
		panic(err) // no reserved keys above
	}
	return m
}

// finish waits until every acknowledged append is visible to read_committed
// readers (Last waits for the open transactions' markers), checks that
// Last is the last acknowledged append, and writes the files readers are
// checked against.
func (s *session) finish(ctx context.Context, aborted []record) (map[string]string, error) {
	last, err := s.wal.Last(ctx)
	if err != nil {
		return nil, errors.Wrap(err, "Last")
	}
	if !last.EQ(s.last) {
		return nil, errors.Newf("Last is %v, the last acknowledged append %v", last, s.last)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.cfg.SeedBrokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, s.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, errors.Wrapf(err, "list start offsets of %s", s.topic)
	}
	ends, err := adm.ListEndOffsets(ctx, s.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, errors.Wrapf(err, "list end offsets of %s", s.topic)
	}
	logEnd, _ := ends.Lookup(s.topic, 0)
	claimsStart, _ := starts.Lookup(s.topic, 1)
	claimsEnd, _ := ends.Lookup(s.topic, 1)

	byOffset := func(a, b record) int { return cmp.Compare(a.offset, b.offset) }
	slices.SortFunc(s.acked, byOffset)
	if err := writeLines(s.c.out+".tsv", s.acked); err != nil {
		return nil, err
	}
	if aborted != nil {
		all := slices.SortedFunc(slices.Values(append(slices.Clone(s.acked), aborted...)), byOffset)
		if err := writeLines(s.c.out+".uncommitted.tsv", all); err != nil {
			return nil, err
		}
	}
	env := map[string]string{
		"TOPIC":            s.topic,
		"TRANSACTIONAL_ID": s.txnID,
		"CHANNEL_TERM":     strconv.FormatInt(s.c.term, 10),
		"ACKED":            strconv.Itoa(len(s.acked)),
		"ABORTED":          strconv.Itoa(len(aborted)),
		"LOG_END":          strconv.FormatInt(logEnd.Offset, 10),
		"CLAIMS_START":     strconv.FormatInt(claimsStart.Offset, 10),
		"CLAIMS_END":       strconv.FormatInt(claimsEnd.Offset, 10),
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "%s=%s\n", k, env[k])
	}
	if err := os.WriteFile(s.c.out+".env", []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	return env, nil
}

func writeLines(path string, rs []record) error {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.line())
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func write(args []string) error {
	var c common
	var records, appenders, batches, batchSize, abortedN int
	fs := flag.NewFlagSet("write", flag.ExitOnError)
	c.register(fs, "interop-log")
	fs.IntVar(&records, "records", 200, "single appends")
	fs.IntVar(&appenders, "appenders", 4, "goroutines the single appends are spread over")
	fs.IntVar(&batches, "batches", 5, "AppendBatch calls after the single appends")
	fs.IntVar(&batchSize, "batch-size", 10, "messages per AppendBatch")
	fs.IntVar(&abortedN, "aborted", 20, "records produced in a transaction that is aborted")
	_ = fs.Parse(args)
	if records < 4 || appenders < 1 || batches < 0 || batchSize < 1 || abortedN < 1 {
		return errors.New("want -records ≥ 4, -appenders ≥ 1, -batches ≥ 0, -batch-size ≥ 1, -aborted ≥ 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()

	// Single appends from several goroutines: concurrent appends share
	// transactions. The first payloads are a null and an empty value;
	// a few properties have an empty value or UTF-8.
	next := make(chan int, records)
	for i := range records {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	errs := make([]error, appenders)
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				payload := []byte(fmt.Sprintf("%s-%d", c.channel, i))
				extra := map[string]string{}
				switch i {
				case 0:
					payload = nil
				case 1:
					payload = []byte{}
				case 2:
					extra["interop.empty"] = ""
				case 3:
					extra["interop.utf8"] = "grüße-✓"
				}
				if err := s.append(ctx, s.msg(strconv.Itoa(i), payload, extra)); err != nil {
					errs[g] = errors.Wrapf(err, "append %d", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	for b := range batches {
		msgs := make([]message.Message, batchSize)
		for j := range msgs {
			msgs[j] = s.msg(fmt.Sprintf("b%d.%d", b, j), []byte(fmt.Sprintf("%s-b%d-%d", c.channel, b, j)),
				map[string]string{"interop.batch": strconv.Itoa(b)})
		}
		ids, err := s.wal.AppendBatch(ctx, msgs)
		if err != nil {
			return errors.Wrapf(err, "append batch %d", b)
		}
		for j, id := range ids {
			if err := s.add(id, msgs[j]); err != nil {
				return err
			}
		}
	}

	abortID := "interop-aborted-" + c.channel
	aborted, err := produceAborted(ctx, s, abortID, abortedN)
	if err != nil {
		return errors.Wrapf(err, "aborted transaction of %s", abortID)
	}
	if err := s.append(ctx, s.msg("after-abort", []byte(c.channel+"-after-abort"), nil)); err != nil {
		return errors.Wrap(err, "append after the aborted transaction")
	}

	env, err := s.finish(ctx, aborted)
	if err != nil {
		return err
	}
	fmt.Printf("write: channel %s (topic %s, transactional id %s), term %d\n", c.channel, s.topic, s.txnID, c.term)
	fmt.Printf("write: %s appends acknowledged: %d single from %d goroutines, %d batches of %d, 1 after the aborted transaction\n",
		env["ACKED"], records, appenders, batches, batchSize)
	fmt.Printf("write: %d records aborted in between (transactional id %s, offsets %d..%d)\n",
		len(aborted), abortID, aborted[0].offset, aborted[len(aborted)-1].offset)
	fmt.Printf("write: partition 0 ends at offset %s; claims in partition 1 at offsets %s..%s\n",
		env["LOG_END"], env["CLAIMS_START"], env["CLAIMS_END"])
	return nil
}

// produceAborted produces n records into partition 0 of the session's topic
// in one transaction of transactional id txnID and aborts it: what a writer
// that died mid-transaction leaves behind. It returns the records with their
// offsets, as a read_uncommitted consumer sees them.
func produceAborted(ctx context.Context, s *session, txnID string, n int) ([]record, error) {
	// The request versions and the compression (none) of the backend's
	// transactional clients: franz-go's default, snappy, would make the
	// partition unreadable to clients without the codec, kafkajs among
	// them, which the backend's records never do.
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.cfg.SeedBrokers...), kgo.TransactionalID(txnID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxVersions(v),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: s.topic, Partition: 0,
			Value:   []byte(fmt.Sprintf("aborted-%s-%d", s.c.channel, i)),
			Headers: []kgo.RecordHeader{{Key: "interop.aborted", Value: []byte(strconv.Itoa(i))}}}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, err
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return nil, err
	}
	out := make([]record, n)
	for i, r := range recs {
		out[i] = record{offset: r.Offset, payload: r.Value, props: map[string]string{"interop.aborted": strconv.Itoa(i)}}
	}
	return out, nil
}

func fence(args []string) error {
	var c common
	var peer string
	fs := flag.NewFlagSet("fence", flag.ExitOnError)
	c.register(fs, "interop-fence")
	fs.StringVar(&peer, "peer", "", "command (run by sh -c) of the external transactional producer (required)")
	_ = fs.Parse(args)
	if peer == "" {
		return errors.New("-peer is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	say := func(format string, args ...any) { fmt.Printf("fence: "+format+"\n", args...) }

	if err := s.append(ctx, s.msg("owner-1", []byte(c.channel+"-owner-1"), nil)); err != nil {
		return errors.Wrap(err, "first append")
	}
	say("streamwal owns channel %s at term %d (transactional id %s) and appended once", c.channel, c.term, s.txnID)

	p, err := startPeer(ctx, peer, s)
	if err != nil {
		return err
	}
	defer p.stop()
	if err := p.waitFor("initialised"); err != nil {
		return err
	}
	say("the peer initialised transactional id %s", s.txnID)

	m := s.msg("stale", []byte(c.channel+"-stale"), nil)
	_, err = walimpls.Append(ctx, s.wal, m)
	switch {
	case err == nil:
		return errors.Newf("streamwal's append succeeded after the peer initialised %s: its producer was not fenced", s.txnID)
	case !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch):
		return errors.Wrap(err, "streamwal's append after the peer's initialisation failed, but not with Kafka's epoch fence")
	case errors.Is(err, walimpls.ErrFenced):
		return errors.Wrap(err, "streamwal's writer took the peer's fence for a higher term's, though no other term claim exists")
	}
	say("streamwal's next append failed with Kafka's epoch fence, as it must: %v", err)

	if err := s.append(ctx, s.msg("owner-2", []byte(c.channel+"-owner-2"), nil)); err != nil {
		return errors.Wrap(err, "the append after the fence (the writer's term claim still wins, so it must re-acquire its producer)")
	}
	say("its claim still wins: the writer re-acquired its producer and the append after it succeeded")

	if err := p.release(); err != nil {
		return err
	}
	say("the peer tried its transaction and was %s", p.verdict)

	env, err := s.finish(ctx, nil)
	if err != nil {
		return err
	}
	say("%s appends acknowledged; partition 0 ends at offset %s", env["ACKED"], env["LOG_END"])
	return nil
}

// peer is the external transactional producer of fence.
type peer struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string // the peer's stdout, closed at its end
	done    chan error  // the peer's exit
	exited  bool
	verdict string
}

func startPeer(ctx context.Context, command string, s *session) (*peer, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = append(os.Environ(),
		"INTEROP_BROKERS="+strings.Join(s.cfg.SeedBrokers, ","),
		"INTEROP_TOPIC="+s.topic,
		"INTEROP_TRANSACTIONAL_ID="+s.txnID)
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second // a killed peer's children may hold its pipes
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, errors.Wrapf(err, "start the peer %q", command)
	}
	p := &peer{cmd: cmd, stdin: stdin, lines: make(chan string), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	return p, nil
}

// waitFor waits for the peer's line want; its end first is an error.
func (p *peer) waitFor(want string) error {
	for l := range p.lines {
		if l == want {
			return nil
		}
		fmt.Printf("  peer: %s\n", l)
	}
	if err := p.wait(); err != nil {
		return errors.Wrapf(err, "the peer ended before it printed %q", want)
	}
	return errors.Newf("the peer ended before it printed %q", want)
}

// release lets the peer try its transaction and waits for its verdict.
func (p *peer) release() error {
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		return errors.Wrap(err, "write to the peer")
	}
	_ = p.stdin.Close()
	for l := range p.lines {
		if strings.HasPrefix(l, "fenced") && p.verdict == "" {
			p.verdict = l
			continue
		}
		fmt.Printf("  peer: %s\n", l)
	}
	if err := p.wait(); err != nil {
		return errors.Wrap(err, "the peer failed (it must be refused for its epoch, and say so)")
	}
	if p.verdict == "" {
		return errors.New("the peer exited 0 without a line starting with \"fenced\"")
	}
	return nil
}

func (p *peer) wait() error {
	for range p.lines {
	}
	p.exited = true
	return <-p.done
}

// stop ends a peer still running.
func (p *peer) stop() {
	if p.exited {
		return
	}
	_ = p.stdin.Close()
	_ = p.cmd.Process.Kill()
	_ = p.wait()
}
