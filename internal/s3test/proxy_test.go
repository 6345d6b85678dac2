package s3test

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// noRetries makes a client that shows every failure the proxy injects.
func noRetries(o *awss3.Options) { o.RetryMaxAttempts = 1 }

// exists says whether key is in s, asked of s directly.
func exists(t *testing.T, s *Store, key string) bool {
	t.Helper()
	_, err := s.Client(t, noRetries).HeadObject(testCtx(t), &awss3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err != nil && httpStatus(err) != http.StatusNotFound {
		t.Fatalf("head %s: %v", key, err)
	}
	return err == nil
}

// TestProxyHold: a held PUT has not reached the store until the test lets
// it through, and then succeeds; a HEAD of the key meanwhile passes.
func TestProxyHold(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			ctx := testCtx(t)
			g := NewGate()
			p := NewProxy(t, s, Rule{Match: And(Method("PUT"), Key("held")), Fault: Hold(g)})
			c := p.Store().Client(t, noRetries)
			done := make(chan error, 1)
			go func() {
				_, err := put(ctx, c, s.Bucket, "held", []byte("x"), nil)
				done <- err
			}()
			if err := g.WaitArrived(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if exists(t, s, "held") {
				t.Fatal("the held PUT reached the store")
			}
			if _, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("held")}); httpStatus(err) != http.StatusNotFound {
				t.Fatalf("HEAD through the proxy while the PUT is held: %v, want 404", err)
			}
			g.Release()
			if err := <-done; err != nil {
				t.Fatalf("released PUT: %v", err)
			}
			if !exists(t, s, "held") {
				t.Fatal("the released PUT is not in the store")
			}
			if n := p.Count("PUT", "held"); n != 1 {
				t.Fatalf("%d PUTs of held, want 1", n)
			}
			reqs := p.Requests()
			if len(reqs) != 2 || !slices.Equal(reqs[0].Faults, []string{"hold"}) || reqs[0].Status != 200 || reqs[1].Status != 404 {
				t.Fatalf("requests %+v", reqs)
			}
		})
	}
}

// TestProxyLetInOrder: Let lets held requests through one at a time, in
// the order they arrived.
func TestProxyLetInOrder(t *testing.T) {
	s := Fake(t)
	ctx := testCtx(t)
	g := NewGate()
	p := NewProxy(t, s, Rule{Match: Method("PUT"), Fault: Hold(g)})
	c := p.Store().Client(t, noRetries)
	done := make(chan string, 3)
	for i := range 3 {
		key := fmt.Sprintf("k%d", i)
		go func() {
			_, err := put(ctx, c, s.Bucket, key, []byte(key), nil)
			if err != nil {
				key += ": " + err.Error()
			}
			done <- key
		}()
		// One at a time, so that arrival order is k0, k1, k2.
		if err := g.WaitArrived(ctx, i+1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		g.Let(1)
		if got, want := <-done, fmt.Sprintf("k%d", i); got != want {
			t.Fatalf("let %d: %s finished, want %s", i, got, want)
		}
	}
}

// TestProxyHoldAnswer: the store wrote the object while its writer still
// waits for the answer.
func TestProxyHoldAnswer(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			ctx := testCtx(t)
			g := NewGate()
			p := NewProxy(t, s, Rule{Match: And(Method("PUT"), KeySuffix("/00000000000000000003")), Fault: HoldAnswer(g)})
			c := p.Store().Client(t, noRetries)
			done := make(chan error, 1)
			go func() {
				_, err := put(ctx, c, s.Bucket, "ch/e1/00000000000000000003", []byte("x"), nil)
				done <- err
			}()
			if err := g.WaitArrived(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if !exists(t, s, "ch/e1/00000000000000000003") {
				t.Fatal("the PUT whose answer is held is not in the store")
			}
			select {
			case err := <-done:
				t.Fatalf("the client was answered (%v) while its answer is held", err)
			default:
			}
			g.Release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestProxyAnswers: SlowDown and InternalError answer without the store
// seeing the request; a client that retries gets through on its next try.
func TestProxyAnswers(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			ctx := testCtx(t)
			p := NewProxy(t, s,
				Rule{Match: And(Method("PUT"), Key("slow")), Fault: SlowDown()},
				Rule{Match: And(Method("GET"), KeyPrefix("broken/")), Fault: InternalError()},
			)
			c := p.Store().Client(t, noRetries)
			_, err := put(ctx, c, s.Bucket, "slow", []byte("x"), nil)
			if httpStatus(err) != http.StatusServiceUnavailable || errorCode(err) != "SlowDown" {
				t.Fatalf("PUT: %v, want 503 SlowDown", err)
			}
			if exists(t, s, "slow") {
				t.Fatal("a PUT answered SlowDown reached the store")
			}
			if _, err := put(ctx, c, s.Bucket, "broken/a", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			_, err = get(ctx, c, s.Bucket, "broken/a")
			if httpStatus(err) != http.StatusInternalServerError || errorCode(err) != "InternalError" {
				t.Fatalf("GET: %v, want 500 InternalError", err)
			}

			// The first two PUTs of "retried" are slowed down; the SDK's
			// third try succeeds.
			p.Add(Rule{Match: And(Method("PUT"), Key("retried"), FirstN(2)), Fault: SlowDown()})
			retrying := p.Store().Client(t, func(o *awss3.Options) {
				o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
					so.MaxAttempts = 3
					so.MaxBackoff = time.Millisecond
					so.RateLimiter = ratelimit.None
				})
			})
			if _, err := put(ctx, retrying, s.Bucket, "retried", []byte("x"), nil); err != nil {
				t.Fatalf("PUT with retries: %v", err)
			}
			var statuses []int
			for _, r := range p.Requests() {
				if r.Key == "retried" {
					statuses = append(statuses, r.Status)
				}
			}
			if !slices.Equal(statuses, []int{503, 503, 200}) {
				t.Fatalf("statuses of the PUTs of retried: %v, want [503 503 200]", statuses)
			}
		})
	}
}

// TestProxyDropAndReset: a dropped PUT never reaches the store and its
// client gets no answer; a PUT reset after the write is in the store while
// its client got no answer either.
func TestProxyDropAndReset(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			ctx := testCtx(t)
			p := NewProxy(t, s,
				Rule{Match: And(Method("PUT"), Key("dropped")), Fault: Drop()},
				Rule{Match: And(Method("PUT"), Key("reset"), FirstN(1)), Fault: ResetAfterWrite()},
			)
			c := p.Store().Client(t, noRetries)
			_, err := put(ctx, c, s.Bucket, "dropped", []byte("x"), nil)
			if err == nil || httpStatus(err) != 0 {
				t.Fatalf("dropped PUT: %v, want a failure without an HTTP answer", err)
			}
			if exists(t, s, "dropped") {
				t.Fatal("the dropped PUT reached the store")
			}
			_, err = put(ctx, c, s.Bucket, "reset", []byte("x"), func(in *awss3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
			if err == nil || httpStatus(err) != 0 {
				t.Fatalf("reset PUT: %v, want a failure without an HTTP answer", err)
			}
			if !exists(t, s, "reset") {
				t.Fatal("the PUT reset after the write is not in the store")
			}
			// Its retry meets its own object: 412.
			_, err = put(ctx, c, s.Bucket, "reset", []byte("x"), func(in *awss3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
			if httpStatus(err) != http.StatusPreconditionFailed {
				t.Fatalf("retry of the reset PUT: %v, want 412", err)
			}
			for _, r := range p.Requests() {
				if r.Key == "dropped" || r.Key == "reset" && len(r.Faults) > 0 {
					if r.Status != 0 || !r.Done {
						t.Fatalf("request %+v: want done with no answer", r)
					}
				}
			}
		})
	}
}

// TestProxyMatchers: rules choose by key pattern and by index, every rule
// counts on its own, and a seeded probability chooses the same requests
// each run.
func TestProxyMatchers(t *testing.T) {
	s := Fake(t)
	ctx := testCtx(t)
	slot := regexp.MustCompile(`^ch/e\d{20}/\d{20}$`)
	p := NewProxy(t, s,
		Rule{Match: And(Method("PUT"), KeyMatches(slot), Nth(1, 3)), Fault: InternalError()},
		Rule{Match: And(Method("PUT"), Not(KeyMatches(slot))), Fault: SlowDown()},
	)
	c := p.Store().Client(t, noRetries)
	var failed []int
	for i := range 5 {
		key := fmt.Sprintf("ch/e%020d/%020d", 1, i)
		if _, err := put(ctx, c, s.Bucket, key, []byte("x"), nil); err != nil {
			if httpStatus(err) != 500 {
				t.Fatal(err)
			}
			failed = append(failed, i)
		}
	}
	if !slices.Equal(failed, []int{1, 3}) {
		t.Fatalf("slots failed: %v, want [1 3]", failed)
	}
	if _, err := put(ctx, c, s.Bucket, "ch/manifest", []byte("x"), nil); errorCode(err) != "SlowDown" {
		t.Fatalf("manifest PUT: %v, want SlowDown", err)
	}

	chosen := func(seed uint64) []int {
		p := NewProxy(t, s, Rule{Match: Probability(0.3, seed), Fault: SlowDown()})
		c := p.Store().Client(t, noRetries)
		var out []int
		for i := range 40 {
			if _, err := get(ctx, c, s.Bucket, "ch/manifest"); errorCode(err) == "SlowDown" {
				out = append(out, i)
			}
		}
		return out
	}
	a, b, other := chosen(7), chosen(7), chosen(8)
	if !slices.Equal(a, b) || len(a) == 0 || len(a) == 40 || slices.Equal(a, other) {
		t.Fatalf("seed 7 chose %v then %v; seed 8 chose %v", a, b, other)
	}
}

// TestProxyRemoveAndObserve: a removed rule no longer acts; OnRequest sees
// each request with the faults chosen for it.
func TestProxyRemoveAndObserve(t *testing.T) {
	s := Fake(t)
	ctx := testCtx(t)
	p := NewProxy(t, s)
	seen := make(chan Request, 10)
	p.OnRequest(func(r Request) { seen <- r })
	c := p.Store().Client(t, noRetries)
	remove := p.Add(Rule{Match: Method("PUT"), Fault: SlowDown()})
	if _, err := put(ctx, c, s.Bucket, "a", []byte("x"), nil); errorCode(err) != "SlowDown" {
		t.Fatalf("PUT: %v, want SlowDown", err)
	}
	remove()
	if _, err := put(ctx, c, s.Bucket, "a", []byte("x"), nil); err != nil {
		t.Fatalf("PUT after the rule's removal: %v", err)
	}
	r1, r2 := <-seen, <-seen
	if r1.Index != 0 || r1.Key != "a" || !slices.Equal(r1.Faults, []string{"respond-SlowDown"}) || r2.Index != 1 || len(r2.Faults) != 0 {
		t.Fatalf("observed %+v and %+v", r1, r2)
	}
}

// TestProxyDelay: a delayed request reaches the store no sooner than its
// delay.
func TestProxyDelay(t *testing.T) {
	s := Fake(t)
	ctx := testCtx(t)
	p := NewProxy(t, s, Rule{Match: Method("PUT"), Fault: Delay(50 * time.Millisecond)})
	c := p.Store().Client(t, noRetries)
	start := time.Now()
	if _, err := put(ctx, c, s.Bucket, "a", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("a PUT delayed by 50ms took %v", d)
	}
}

// TestProxyCloseEndsHeld: a request still held when the test ends gets no
// answer, and the proxy's cleanup does not wait for the gate.
func TestProxyCloseEndsHeld(t *testing.T) {
	s := Fake(t)
	ctx := testCtx(t)
	g := NewGate()
	errs := make(chan error, 1)
	t.Run("held", func(t *testing.T) {
		p := NewProxy(t, s, Rule{Match: Method("PUT"), Fault: Hold(g)})
		c := p.Store().Client(t, noRetries)
		go func() {
			_, err := put(ctx, c, s.Bucket, "a", []byte("x"), nil)
			errs <- err
		}()
		if err := g.WaitArrived(ctx, 1); err != nil {
			t.Fatal(err)
		}
	})
	if err := <-errs; err == nil {
		t.Fatal("a PUT held as its proxy closed succeeded")
	}
	if exists(t, s, "a") {
		t.Fatal("a PUT held as its proxy closed reached the store")
	}
}
