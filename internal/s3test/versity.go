package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/sys/unix"
)

// VersityVersion is the versitygw release Versity runs: the first whose
// conditional PUTs are atomic (versitygw PR #2288). The Makefile pins the
// same (VERSITYGW_VERSION).
const VersityVersion = "v1.8.0"

// VersityEnv names the variable that gives the versitygw binary to run
// (make test sets it to the one it built into ./bin). Unset, Versity
// builds the binary once into the user's cache directory.
const VersityEnv = "STREAMWAL_VERSITYGW"

const versityModule = "github.com/versity/versitygw/cmd/versitygw"

// Versity starts versitygw VersityVersion in a process of its own: its
// posix backend on a temporary directory (with a sidecar directory for
// metadata where that directory's file system has no user xattrs),
// listening on a loopback port only, with one bucket. It returns once the
// gateway answers signed requests; tb's cleanup stops it (SIGTERM, then
// SIGKILL after 10 s) and waits for it. Its output is logged when the
// test failed.
func Versity(tb testing.TB) *Store {
	tb.Helper()
	return versity(tb, false)
}

// versity starts versitygw like Versity; sidecar keeps its metadata in a
// sidecar directory even where xattrs work.
func versity(tb testing.TB, sidecar bool) *Store {
	tb.Helper()
	bin := versityBinary(tb)
	root := tb.TempDir()
	var posixArgs []string
	if sidecar || !hasUserXattrs(root) {
		posixArgs = append(posixArgs, "--sidecar", tb.TempDir())
	}
	// Credentials of its own, so that it alone answers them (see waitReady).
	s := &Store{Name: "versitygw", Bucket: "streamwal-test",
		AccessKey: "streamwal-" + randomHex(4), SecretKey: randomHex(16), Region: "us-east-1"}
	// The free port is found by listening and closing: another process can
	// take it meanwhile, so a start that lost it is tried again.
	for attempt := 1; ; attempt++ {
		addr := freeLoopbackAddr(tb)
		args := append(append([]string{"--quiet", "--port", addr, "posix"}, posixArgs...), root)
		g := startGateway(tb, bin, args, s)
		s.Endpoint = "http://" + addr
		err := g.waitReady(tb, s)
		if err == nil {
			tb.Cleanup(func() {
				g.stop()
				if tb.Failed() {
					tb.Logf("s3test: versitygw output:\n%s", g.out.String())
				}
			})
			break
		}
		g.stop()
		if attempt < 3 && strings.Contains(g.out.String(), "address already in use") {
			tb.Logf("s3test: versitygw lost port %s to another process; trying another", addr)
			continue
		}
		tb.Fatalf("s3test: versitygw %s did not start: %v\n%s", bin, err, g.out.String())
	}
	createBucket(tb, s)
	return s
}

// gateway is one versitygw process. Its owner calls stop, which ends it and
// waits for it.
type gateway struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{} // closed when cmd.Wait returned
	err    error         // cmd.Wait's, once exited is closed
}

func startGateway(tb testing.TB, bin string, args []string, s *Store) *gateway {
	tb.Helper()
	g := &gateway{out: &lockedBuffer{}, exited: make(chan struct{})}
	g.cmd = exec.Command(bin, args...)
	g.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	// Killed with the test's process, should that die first.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		tb.Fatalf("s3test: start versitygw: %v", err)
	}
	go func() {
		g.err = g.cmd.Wait()
		close(g.exited)
	}()
	return g
}

// waitReady returns once the gateway answers s's endpoint, or an error
// when it exited first or did not answer within a minute. The answer must
// be a versitygw's that accepts s's credentials, which are this gateway's
// alone: a server of another test that took the port meanwhile does not
// count (the gateway then fails to bind, and exits).
func (g *gateway) waitReady(tb testing.TB, s *Store) error {
	c := s.Client(tb, func(o *awss3.Options) { o.RetryMaxAttempts = 1 })
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := c.ListBuckets(ctx, &awss3.ListBucketsInput{})
		cancel()
		if err == nil {
			raw, _ := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response)
			if raw != nil && raw.Header.Get("Server") == "VERSITYGW" {
				return nil
			}
			err = fmt.Errorf("the server at %s is not versitygw", s.Endpoint)
		}
		select {
		case <-g.exited:
			return fmt.Errorf("exited: %v", g.err)
		case <-deadline.C:
			return fmt.Errorf("no answer at %s within a minute: %v", s.Endpoint, err)
		case <-tick.C:
		}
	}
}

// stop ends the gateway and waits for it.
func (g *gateway) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-g.exited:
	case <-t.C:
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

func createBucket(tb testing.TB, s *Store) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client(tb)
	if _, err := c.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		tb.Fatalf("s3test: create bucket %s on %s: %v", s.Bucket, s.Endpoint, err)
	}
	if _, err := c.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		tb.Fatalf("s3test: bucket %s on %s: %v", s.Bucket, s.Endpoint, err)
	}
}

func freeLoopbackAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("s3test: listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// hasUserXattrs reports whether dir's file system keeps user xattrs, where
// versitygw's posix backend keeps object metadata by default.
func hasUserXattrs(dir string) bool {
	err := unix.Setxattr(dir, "user.streamwal-probe", []byte("1"), 0)
	if err != nil {
		return false
	}
	_ = unix.Removexattr(dir, "user.streamwal-probe")
	return true
}

// versityBinary is the versitygw binary to run: $STREAMWAL_VERSITYGW, or
// the one built into the user's cache directory, which it builds (go
// install from the module proxy) if it is not there yet. A lock file there
// makes parallel test processes build it once.
func versityBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv(VersityEnv); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			tb.Fatalf("s3test: $%s=%s is not a versitygw binary: %v", VersityEnv, p, err)
		}
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		tb.Fatalf("s3test: no cache directory for versitygw (or set $%s): %v", VersityEnv, err)
	}
	dir := filepath.Join(cache, "streamwal")
	bin := filepath.Join(dir, "versitygw-"+VersityVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("s3test: %v", err)
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatalf("s3test: %v", err)
	}
	defer func() { _ = lock.Close() }() // releases the flock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		tb.Fatalf("s3test: lock %s: %v", lock.Name(), err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin // another process built it while this one waited
	}
	tb.Logf("s3test: building versitygw %s into %s (once; a minute or two)", VersityVersion, bin)
	if err := buildVersity(dir, bin); err != nil {
		tb.Fatalf("s3test: build versitygw (or set $%s): %v", VersityEnv, err)
	}
	return bin
}

// buildVersity installs versitygw into a fresh directory under dir and
// renames it to bin, so that bin is never seen half written.
func buildVersity(dir, bin string) error {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// go test puts its toolchain's bin first on PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool, "install", versityModule+"@"+VersityVersion)
	cmd.Dir = tmp // outside any module: the versitygw module alone decides
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS="+withoutModFlag(os.Getenv("GOFLAGS")))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return os.Rename(filepath.Join(tmp, "versitygw"), bin)
}

// withoutModFlag drops -mod=... from GOFLAGS: go install pkg@version
// refuses it.
func withoutModFlag(flags string) string {
	var keep []string
	for _, f := range strings.Fields(flags) {
		if !strings.HasPrefix(f, "-mod=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lockedBuffer collects a process's output, written from exec's copying
// goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	const limit = 1 << 20
	if b.buf.Len() < limit {
		b.buf.Write(p[:min(len(p), limit-b.buf.Len())])
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
