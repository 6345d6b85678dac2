package s3

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// The process tests (process_test.go) run a writer in a child process:
// this test binary, run again with ChildEnv set to a ChildSpec in JSON.
// TestMain hands it to runChild instead of running the tests. The child
// opens one channel ReadWrite and appends with concurrent appenders until
// each has failed once (or it is killed), and reports on stdout, each line
// written whole by one write (atomic on a pipe):
//
//	opened <epoch>                       the open returned
//	acked <payload> <id>                 the message's append was acknowledged
//	failed <payload> <outcome> <kind> <error...>
//	                                     it failed: outcome notstored or
//	                                     unknown (walimpls.NotStored), kind
//	                                     fenced or other
//	done                                 every appender stopped
//
// An appender makes appends k = 0, 1, ...: every third a batch of two or
// three messages (AppendBatch), the others one message. A message's
// payload says where it comes from: t<term>-g<appender>-<k>, and for a
// batch's message -<i>of<n> after it.
const ChildEnv = "STREAMWAL_S3_PROCESS_CHILD"

// ChildSpec is what a child process does: the store and channel it opens,
// at which term, with how many appenders (0: it opens, reports and exits).
type ChildSpec struct {
	Endpoint, Bucket, Region, AccessKey, SecretKey, Prefix string

	Channel   string
	Term      int64
	Appenders int

	FlushInterval time.Duration
	FlushRecords  int
	MaxInflight   int
	MaxAttempts   int
}

// runChild is the child's main: it returns the process's exit code.
func runChild(raw string) int {
	var spec ChildSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child: spec:", err)
		return 2
	}
	ctx := context.Background()
	cfg := Config{Endpoint: spec.Endpoint, Bucket: spec.Bucket, Region: spec.Region, Prefix: spec.Prefix, PathStyle: true,
		Credentials:   credentials.NewStaticCredentialsProvider(spec.AccessKey, spec.SecretKey, ""),
		FlushInterval: spec.FlushInterval, FlushRecords: spec.FlushRecords, MaxInflight: spec.MaxInflight,
		MaxAttempts: spec.MaxAttempts, ProbeRacers: 2}
	o, err := New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: new:", err)
		return 1
	}
	w, err := o.Open(ctx, walimpls.Channel{Name: spec.Channel, Term: spec.Term})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		return 1
	}
	var out childOut
	out.write(fmt.Sprintf("opened %d\n", w.(*wal).epoch.Epoch))
	var wg sync.WaitGroup
	for g := range spec.Appenders {
		wg.Go(func() {
			for k := 0; ; k++ {
				prefix := fmt.Sprintf("t%d-g%d-%d", spec.Term, g, k)
				payloads := []string{prefix}
				if k%3 == 2 {
					n := 2 + k%2
					payloads = payloads[:0]
					for i := range n {
						payloads = append(payloads, fmt.Sprintf("%s-%dof%d", prefix, i, n))
					}
				}
				msgs := make([]message.Message, len(payloads))
				for i, p := range payloads {
					msgs[i], _ = message.New([]byte(p), nil)
				}
				ids, err := w.AppendBatch(ctx, msgs)
				var b strings.Builder
				for i, p := range payloads {
					if err == nil {
						fmt.Fprintf(&b, "acked %s %s\n", p, ids[i].Marshal())
						continue
					}
					outcome, kind := "unknown", "other"
					if walimpls.NotStored(err) {
						outcome = "notstored"
					}
					if errors.Is(err, walimpls.ErrFenced) {
						kind = "fenced"
					}
					fmt.Fprintf(&b, "failed %s %s %s %s\n", p, outcome, kind, strings.ReplaceAll(err.Error(), "\n", " "))
				}
				out.write(b.String())
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	out.write("done\n")
	return 0
}

// childOut writes the child's report lines, each call's in one write.
type childOut struct{ mu sync.Mutex }

func (c *childOut) write(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = os.Stdout.WriteString(s)
}
