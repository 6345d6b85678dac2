package main

import (
	"bytes"
	"context"
	"encoding/json"
	stderrors "errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/s3test"
	"github.com/streamwal/streamwal/walimpls"
)

// TestWaitKeepsTheDeadlineAndTheLastError: a wait that runs out of time
// fails with an error that names the last attempt's error and matches it
// as well as context.DeadlineExceeded, with retries and without.
func TestWaitKeepsTheDeadlineAndTheLastError(t *testing.T) {
	refused := errors.New("connection refused")
	c := &connector{timeout: 150 * time.Millisecond, errOut: io.Discard}

	err := c.wait(context.Background(), "kafka at 127.0.0.1:1", "answer", true, func(context.Context) error { return refused })
	require.EqualError(t, err, "kafka at 127.0.0.1:1 did not answer within 150ms (-connect-timeout): context deadline exceeded (last attempt: connection refused)")
	for _, target := range []error{context.DeadlineExceeded, refused} {
		require.True(t, errors.Is(err, target), "cockroachdb errors.Is matches %v", target)
		require.True(t, stderrors.Is(err, target), "the standard errors.Is matches %v", target)
	}

	err = c.wait(context.Background(), "pulsar at pulsar://127.0.0.1:1", "open 4 channels", false, func(ctx context.Context) error {
		<-ctx.Done()
		return errors.Wrap(refused, "open")
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, refused)
	require.Contains(t, err.Error(), "did not open 4 channels within 150ms (-connect-timeout)")
}

// awsEnv gives the AWS chain the store's credentials and nothing else of
// this machine's (no shared files, no instance metadata).
func awsEnv(t *testing.T, st *s3test.Store) {
	t.Setenv("AWS_ACCESS_KEY_ID", st.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", st.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// -backend s3 without -addr runs against a store in this process, which
// nothing waits for, and stops it at the end (goleak checks).
func TestRunOnS3InProcess(t *testing.T) {
	var out, errOut bytes.Buffer
	p := small(params{backend: "s3", s3FlushInterval: 2 * time.Millisecond})
	require.NoError(t, run(context.Background(), p, &out, &errOut), "%s\n%s", out.String(), errOut.String())
	require.Regexp(t, `(?m)^2 channels × 4 appenders, 1,000 records of 128 B in all, backend s3 \(http://127\.0\.0\.1:\d+, gofakes3 in this process, bucket streamwal\)$`, out.String())
	require.Contains(t, out.String(), "delivered 1,000: every acknowledged record was delivered exactly once, in timetick order")
	require.NotContains(t, errOut.String(), "waiting for", "a store in this process is not waited for")

	p = small(params{backend: "s3", s3Bucket: "other", json: true})
	p.records = 8 // at the default flush interval: each append waits for it
	out.Reset()
	require.NoError(t, run(context.Background(), p, &out, nil))
	var s Summary
	require.NoError(t, json.Unmarshal(out.Bytes(), &s), out.String())
	require.Equal(t, "s3", s.Backend)
	require.Equal(t, "gofakes3 in this process, bucket other", s.Detail)
	require.EqualValues(t, 16, s.Delivered)
}

// -backend s3 -addr runs against that store, waited for like a Kafka
// cluster, with the AWS chain's credentials; a -config file names one the
// same way.
func TestRunOnS3Endpoint(t *testing.T) {
	st := s3test.Fake(t)
	awsEnv(t, st)
	var out, errOut bytes.Buffer
	p := small(params{backend: "s3", addr: st.Endpoint, s3Bucket: st.Bucket, s3FlushInterval: 2 * time.Millisecond})
	require.NoError(t, run(context.Background(), p, &out, &errOut), "%s\n%s", out.String(), errOut.String())
	require.Contains(t, out.String(), "2 channels × 4 appenders, 1,000 records of 128 B in all, backend s3 ("+st.Endpoint+", bucket "+st.Bucket+", prefix streamwal/)")
	require.Contains(t, out.String(), "delivered 1,000: every acknowledged record was delivered exactly once")
	require.Contains(t, errOut.String(), "waiting for s3 at "+st.Endpoint+" to answer (giving up after 30s, -connect-timeout)\n")

	p = small(params{config: filepath.Join(t.TempDir(), "node.yaml"), term: 2})
	require.NoError(t, os.WriteFile(p.config, fmt.Appendf(nil, "backend: s3\ns3:\n  endpoint: %s\n  bucket: %s\n  prefix: bench/\n  pathStyle: true\n  flushInterval: 2ms\n",
		st.Endpoint, st.Bucket), 0o600))
	out.Reset()
	require.NoError(t, run(context.Background(), p, &out, nil), out.String())
	require.Contains(t, out.String(), "backend s3 ("+st.Endpoint+", bucket "+st.Bucket+", prefix bench/)")
	require.Contains(t, out.String(), "delivered 1,000: every acknowledged record was delivered exactly once")

	// A bucket the store does not have is a configuration error at once,
	// not something to wait for.
	start := time.Now()
	err := run(context.Background(), small(params{backend: "s3", addr: st.Endpoint, s3Bucket: "nosuch"}), &out, nil)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.ErrorContains(t, err, "(no such bucket)")
	require.Less(t, time.Since(start), DefaultConnectTimeout, "not waited for")
}

// An S3 store that does not answer is waited for and given up on after
// -connect-timeout, like a Kafka cluster; flags for another backend, or
// beside -config, are refused.
func TestRunS3Refusals(t *testing.T) {
	st := s3test.Fake(t)
	awsEnv(t, st)
	addr := "http://" + closedAddr(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), small(params{backend: "s3", addr: addr, connectTimeout: time.Second}), &out, &errOut)
	require.ErrorContains(t, err, "s3 at "+addr+" did not answer within 1s (-connect-timeout)")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The last attempt's error is kept: connection refused, unless the
	// client's own retries of the first attempt outlasted the second.
	require.ErrorContains(t, err, "(last attempt: s3: endpoint "+addr+` bucket "streamwal": HeadBucket: `)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Logf("the first attempt was cut short: %v", err)
	}
	require.Contains(t, errOut.String(), "waiting for s3 at "+addr+" to answer")

	err = run(context.Background(), small(params{backend: "s3", addr: "127.0.0.1:9000"}), &out, nil)
	require.ErrorIs(t, err, walimpls.ErrInvalidConfig)
	require.ErrorContains(t, err, "is not an http:// or https:// URL")
	err = run(context.Background(), small(params{backend: "memory", s3Bucket: "b"}), &out, nil)
	require.ErrorContains(t, err, "-s3-bucket and -s3-flush-interval are for -backend s3")
	err = run(context.Background(), small(params{config: "node.yaml", s3FlushInterval: time.Millisecond}), &out, nil)
	require.ErrorContains(t, err, "-backend and -addr choose the backend without a -config file (so do -s3-bucket and -s3-flush-interval)")
}
