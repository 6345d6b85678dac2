package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/kafka"
	"github.com/streamwal/streamwal/walimpls/impls/local"
	"github.com/streamwal/streamwal/walimpls/impls/memory"
	"github.com/streamwal/streamwal/walimpls/impls/pulsar"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// small is a run small enough for a test.
func small(p params) params {
	p.channels, p.appenders, p.records, p.size = 2, 4, 500, 128
	if p.term == 0 {
		p.term = 1
	}
	return p
}

// The main job runs end to end on the default backend, twice on the same
// directory (a restart at a higher term), and says what it runs first.
func TestRunOnLocal(t *testing.T) {
	dir := t.TempDir()
	for term := int64(1); term <= 2; term++ {
		var out, errOut bytes.Buffer
		err := run(context.Background(), small(params{dir: dir, term: term}), &out, &errOut)
		require.NoError(t, err, out.String())
		lines := strings.Split(out.String(), "\n")
		require.Equal(t, "2 channels × 4 appenders, 1,000 records of 128 B in all, backend local ("+dir+", sync always)", lines[0])
		require.Equal(t, fmt.Sprintf("term %d; a scanner per channel checks that every acknowledged record is delivered once, in timetick order", term), lines[1])
		require.Regexp(t, `(?m)^appended 1,000 records in \S+: [\d,]+ records/s, [\d.]+ MiB/s$`, out.String())
		require.Contains(t, out.String(), "delivered 1,000: every acknowledged record was delivered exactly once, in timetick order")
		require.Regexp(t, `(?m)^append latency +p50 +p90 +p99 +p99\.9 +max$`, out.String())
		require.Regexp(t, `(?m)^1,000 appends( +[\d.]+(ns|µs|ms|s)){5}$`, out.String())
		require.Empty(t, errOut.String(), "a local run does not wait for anything")
	}
	var out bytes.Buffer
	err := run(context.Background(), params{dir: dir, channels: 1, appenders: 1, records: 1, size: 1, term: 1}, &out, nil)
	require.Error(t, err, "a lower term than the last run's is fenced")
}

// -json prints one object with the header facts, the counts, the rates and
// the latencies, and nothing else.
func TestRunJSON(t *testing.T) {
	for _, backend := range []string{"memory", "local"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			p := small(params{backend: backend, dir: dir, json: true, term: 7})
			if backend == "memory" {
				p.dir = ""
			}
			var out bytes.Buffer
			require.NoError(t, run(context.Background(), p, &out, nil))
			require.Equal(t, 1, bytes.Count(out.Bytes(), []byte("\n")), "one line: %s", out.String())
			var raw map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &raw), out.String())
			var s Summary
			dec := json.NewDecoder(&out)
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&s))
			for _, k := range []string{"backend", "channels", "appendersPerChannel", "recordsPerChannel", "records", "recordBytes", "term",
				"appended", "delivered", "verified", "interrupted", "elapsedSeconds", "recordsPerSecond", "bytesPerSecond", "appendLatencyMs"} {
				require.Contains(t, raw, k)
			}
			require.Equal(t, backend, s.Backend)
			if backend == "local" {
				require.Equal(t, dir, s.Target)
				require.Equal(t, "sync always", s.Detail)
			} else {
				require.Equal(t, "in this process", s.Detail)
			}
			require.Equal(t, 2, s.Channels)
			require.Equal(t, 4, s.AppendersPerChannel)
			require.Equal(t, 500, s.RecordsPerChannel)
			require.EqualValues(t, 1000, s.Records)
			require.Equal(t, 128, s.RecordBytes)
			require.EqualValues(t, 7, s.Term)
			require.EqualValues(t, 1000, s.Appended)
			require.EqualValues(t, 1000, s.Delivered)
			require.True(t, s.Verified)
			require.False(t, s.Interrupted)
			require.Positive(t, s.ElapsedSeconds)
			require.Positive(t, s.RecordsPerSecond)
			require.InDelta(t, s.RecordsPerSecond*128, s.BytesPerSecond, 1e-6*s.BytesPerSecond)
			l := s.AppendLatencyMs
			require.Positive(t, l.P50)
			require.True(t, l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max, "%+v", l)
		})
	}
}

// -dir is the directory used, whatever it is spelt with: it used to be
// pasted into YAML, where `data #1` became `data`.
func TestRunDirWithSpaceAndHash(t *testing.T) {
	t.Chdir(t.TempDir())
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), small(params{dir: "data #1"}), &out, nil), out.String())
	require.Contains(t, out.String(), "backend local (data #1, sync always)")
	entries, err := os.ReadDir("data #1")
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	_, err = os.Stat("data")
	require.ErrorIs(t, err, os.ErrNotExist)
}

// notifyingWriter is an io.Writer safe for concurrent use that signals
// every write.
type notifyingWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newNotifyingWriter() *notifyingWriter { return &notifyingWriter{wrote: make(chan struct{}, 1)} }

func (w *notifyingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return w.buf.Write(p)
}

func (w *notifyingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until w holds a match of re, or fails the test at ctx's end.
func (w *notifyingWriter) waitFor(ctx context.Context, t *testing.T, re *regexp.Regexp) {
	t.Helper()
	for !re.MatchString(w.String()) {
		select {
		case <-w.wrote:
		case <-ctx.Done():
			t.Fatalf("no %s in %q", re, w.String())
		}
	}
}

// A run stopped by its context (SIGINT) prints the summary of what it did
// and returns an error marked errInterrupted (exit code 130).
func TestRunInterrupted(t *testing.T) {
	for _, c := range []struct {
		name     string
		backend  string
		json     bool
		terminal bool
	}{
		{"memory text", "memory", false, false},
		{"local text on a terminal", "local", false, true},
		{"memory json", "memory", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait, stop := context.WithTimeout(context.Background(), time.Minute)
			defer stop()
			// Far more records than the run can append before it is stopped.
			p := params{backend: c.backend, dir: t.TempDir(), channels: 2, appenders: 4, records: 1 << 30, size: 64, term: 1,
				json: c.json, terminal: c.terminal, progressEvery: time.Millisecond}
			if c.backend == "memory" {
				p.dir = ""
			}
			out, errOut := newNotifyingWriter(), newNotifyingWriter()
			done := make(chan error, 1)
			go func() { done <- run(ctx, p, out, errOut) }()
			// Stop it once progress shows appends.
			errOut.waitFor(wait, t, regexp.MustCompile(`appended [1-9][\d,]* of 2,147,483,648 \(\d+%\), delivered [\d,]+, [\d,]+ records/s`))
			cancel()
			var err error
			select {
			case err = <-done:
			case <-wait.Done():
				t.Fatal("the run did not stop")
			}
			require.ErrorIs(t, err, errInterrupted)
			require.Regexp(t, `^interrupted after [1-9][\d,]* of 2,147,483,648 records were appended$`, err.Error())
			if c.terminal {
				require.Contains(t, errOut.String(), "\r\x1b[K[")
				require.True(t, strings.HasSuffix(errOut.String(), "\r\x1b[K"), "the progress line is cleared at the end")
				require.NotContains(t, errOut.String(), "\n")
			} else {
				require.Regexp(t, `(?m)^\[\d+s\] appended`, errOut.String())
			}
			if c.json {
				var s Summary
				require.NoError(t, json.Unmarshal([]byte(out.String()), &s), out.String())
				require.True(t, s.Interrupted)
				require.False(t, s.Verified)
				require.Positive(t, s.Appended)
				require.Less(t, s.Appended, s.Records)
				require.Positive(t, s.AppendLatencyMs.Max)
				return
			}
			require.Regexp(t, `(?m)^interrupted after \S+: appended [1-9][\d,]* of 2,147,483,648 records \(\d+%\), [\d,]+ records/s`, out.String())
			require.Regexp(t, `(?m)^delivered [\d,]+ so far, each once and in order; the rest was not checked$`, out.String())
			require.Regexp(t, `(?m)^append latency +p50 +p90 +p99 +p99\.9 +max$`, out.String())
			require.NotContains(t, out.String(), "exactly once")
		})
	}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// An unreachable Kafka or Pulsar is waited for, with a line naming its
// address, and given up on after -connect-timeout with an error that says
// so, from the flags and from a -config file alike.
func TestRunUnreachableCluster(t *testing.T) {
	const timeout = time.Second
	for _, c := range []struct{ name, backend, yaml, want string }{
		{"kafka flags", "kafka", "", "kafka at %s"},
		{"pulsar flags", "pulsar", "", "pulsar at pulsar://%s"},
		{"kafka config", "", "backend: kafka\nkafka:\n  seedBrokers: [%s]\n", "kafka at %s"},
		{"pulsar config", "", "backend: pulsar\npulsar:\n  serviceUrl: pulsar://%s\n", "pulsar at pulsar://%s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := closedAddr(t)
			p := small(params{backend: c.backend, addr: addr, connectTimeout: timeout})
			if c.yaml != "" {
				p.backend, p.addr = "", ""
				p.config = filepath.Join(t.TempDir(), "node.yaml")
				require.NoError(t, os.WriteFile(p.config, fmt.Appendf(nil, c.yaml, addr), 0o600))
			}
			what := fmt.Sprintf(c.want, addr)
			var out, errOut bytes.Buffer
			start := time.Now()
			err := run(context.Background(), p, &out, &errOut)
			took := time.Since(start)
			require.Error(t, err)
			require.Contains(t, err.Error(), what+" did not answer within 1s (-connect-timeout)")
			require.Contains(t, err.Error(), "refused")
			require.ErrorIs(t, err, context.DeadlineExceeded, "the connect timeout is kept")
			require.ErrorIs(t, err, syscall.ECONNREFUSED, "the last attempt's error is kept")
			require.Less(t, took, timeout+5*time.Second, "gave up within the connect timeout")
			require.GreaterOrEqual(t, took, timeout, "waited for the connect timeout")
			require.Contains(t, errOut.String(), "waiting for "+what+" to answer (giving up after 1s, -connect-timeout)\n")
			require.Contains(t, out.String(), "backend "+strings.SplitN(what, " at ", 2)[0]+" ("+strings.SplitN(what, " at ", 2)[1]+")")
		})
	}
}

// A -config file with a misspelt key stops the run before anything starts,
// naming the file, the key's line and its path.
func TestRunRefusesAMisspeltConfig(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"misspelt backend key", "bakend: memory\n", `:1: bakend: unknown key (did you mean "backend"?)`},
		{"misspelt section", "backend: local\nlcoal:\n  dir: ./d2\n", `:2: lcoal: unknown key (did you mean "local"?)`},
		{"misspelt nested key", "backend: local\nlocal:\n  dir: ./d2\n  segmentByte: 1048576\n", `:4: local.segmentByte: unknown key (did you mean "segmentBytes"?)`},
		{"wrong type", "backend: local\nlocal:\n  dir: ./d2\n  segmentBytes: big\n", `:4: local.segmentBytes: want an integer, got "big"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.yaml")
			require.NoError(t, os.WriteFile(path, []byte(c.yaml), 0o600))
			var out bytes.Buffer
			err := run(context.Background(), params{config: path, dir: t.TempDir(), channels: 1, appenders: 1, records: 1, size: 1, term: 1}, &out, nil)
			require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
			require.Contains(t, err.Error(), "selector: "+path+c.want)
			require.Empty(t, out.String())
		})
	}
	// A value the backend refuses is reported at its line, before the run
	// says anything.
	path := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(path, []byte("local:\n  dir: "+t.TempDir()+"\n  sync: sometimes\n"), 0o600))
	var out bytes.Buffer
	err := run(context.Background(), params{config: path, channels: 1, appenders: 1, records: 1, size: 1, term: 1}, &out, nil)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.Contains(t, err.Error(), "selector: "+path+":3: local.sync: ")
	require.Empty(t, out.String())
}

// A -config file runs its backend; -backend and -addr go without one.
func TestRunFlagsAndConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "from # config")
	path := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(path, []byte("local:\n  dir: \""+dir+"\"\n  sync: none\n"), 0o600))
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), small(params{config: path}), &out, nil), out.String())
	require.Contains(t, out.String(), "backend local ("+dir+", sync none)")

	for _, p := range []params{{config: path, backend: "memory"}, {config: path, addr: "127.0.0.1:1"}} {
		err := run(context.Background(), small(p), &out, nil)
		require.ErrorContains(t, err, "-backend and -addr choose the backend without a -config file")
	}
	err := run(context.Background(), small(params{backend: "kafak"}), &out, nil)
	require.ErrorIs(t, err, walimpls.ErrUnknownBackend)
	err = run(context.Background(), small(params{backend: "memory", addr: "127.0.0.1:1"}), &out, nil)
	require.ErrorContains(t, err, "-addr is for -backend kafka, pulsar or s3")
	require.False(t, errors.Is(err, errInterrupted))
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 80000: "80,000", 1234567: "1,234,567", -1234: "-1,234"} {
		require.Equal(t, want, commas(n))
	}
	for n, want := range map[int]string{0: "0 B", 128: "128 B", 1024: "1 KiB", 1536: "1536 B", 4 << 20: "4 MiB"} {
		require.Equal(t, want, sizeString(n))
	}
	for d, want := range map[time.Duration]string{
		500 * time.Nanosecond: "500ns", 412 * time.Microsecond: "412µs", 1130 * time.Microsecond: "1.13ms", 2051 * time.Millisecond: "2.051s",
	} {
		require.Equal(t, want, durString(d))
	}
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Duration(i + 1)
	}
	require.Equal(t, time.Duration(500), percentile(lat, 0.5))
	require.Equal(t, time.Duration(990), percentile(lat, 0.99))
	require.Equal(t, time.Duration(999), percentile(lat, 0.999))
	require.Equal(t, time.Duration(1000), percentile(lat, 1))
	require.Equal(t, time.Duration(0), percentile(nil, 0.5))

	b := &bench{p: params{appenders: 16, records: 20000, size: 1024}, channels: 4, backend: "local", target: "./streamwal-data", detail: "sync always"}
	require.Equal(t, "4 channels × 16 appenders, 80,000 records of 1 KiB in all, backend local (./streamwal-data, sync always)", b.headline())
	require.Equal(t, "[3s] appended 34,112 of 80,000 (42%), delivered 33,990, 11,370 records/s",
		b.progressLine(3*time.Second+100*time.Millisecond, 34112, 33990, 11370.4), "percentages round down: 100% is done")
	b = &bench{p: params{appenders: 1, records: 1, size: 1}, channels: 1, backend: "memory", detail: "in this process"}
	require.Equal(t, "1 channel × 1 appender, 1 records of 1 B in all, backend memory (in this process)", b.headline())
}

// A run on Kafka (an in-process kfake broker), from a -config file (with
// quick metadata refreshes: the defaults of the flags' config take seconds
// on kfake).
func TestRunOnKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	require.NoError(t, err)
	defer c.Close()
	addr := c.ListenAddrs()[0]
	p := small(params{config: filepath.Join(t.TempDir(), "node.yaml")})
	require.NoError(t, os.WriteFile(p.config, []byte("backend: kafka\nkafka:\n  seedBrokers: ["+addr+"]\n  metadataMinAge: 10ms\n  retryBackoff: 10ms\n"), 0o600))
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), p, &out, &errOut), "%s\n%s", out.String(), errOut.String())
	require.Contains(t, out.String(), "2 channels × 4 appenders, 1,000 records of 128 B in all, backend kafka ("+addr+")")
	require.Contains(t, out.String(), "delivered 1,000: every acknowledged record was delivered exactly once")
	require.Contains(t, errOut.String(), "waiting for kafka at "+addr+" to answer (giving up after 30s, -connect-timeout)\n")
}

// The flags build the backends' own Config structs.
func TestFlagConfig(t *testing.T) {
	for _, c := range []struct {
		p    params
		name string
		cfg  any
	}{
		{params{dir: "data #1"}, "local", &local.Config{Dir: "data #1"}},
		{params{backend: "local", dir: "d"}, "local", &local.Config{Dir: "d"}},
		{params{backend: "memory"}, "memory", &memory.Config{}},
		{params{backend: "kafka"}, "kafka", &kafka.Config{SeedBrokers: []string{"127.0.0.1:9092"}}},
		{params{backend: "kafka", addr: "a:1,b:2"}, "kafka", &kafka.Config{SeedBrokers: []string{"a:1", "b:2"}}},
		{params{backend: "pulsar"}, "pulsar", &pulsar.Config{ServiceURL: "pulsar://127.0.0.1:6650"}},
		{params{backend: "pulsar", addr: "h:6650"}, "pulsar", &pulsar.Config{ServiceURL: "pulsar://h:6650"}},
		{params{backend: "pulsar", addr: "pulsar+ssl://h:6651"}, "pulsar", &pulsar.Config{ServiceURL: "pulsar+ssl://h:6651"}},
		{params{backend: "s3"}, "s3", &inProcessS3{bucket: "streamwal"}},
		{params{backend: "s3", s3Bucket: "b", s3FlushInterval: time.Millisecond}, "s3", &inProcessS3{bucket: "b", flushInterval: time.Millisecond}},
		{params{backend: "s3", addr: "http://h:9000"}, "s3", &s3.Config{Endpoint: "http://h:9000", Bucket: "streamwal", PathStyle: true}},
		{params{backend: "s3", addr: "https://h", s3Bucket: "b"}, "s3", &s3.Config{Endpoint: "https://h", Bucket: "b", PathStyle: true}},
	} {
		name, cfg, err := flagConfig(c.p)
		require.NoError(t, err)
		require.Equal(t, c.name, name)
		require.Equal(t, c.cfg, cfg)
	}
}
