package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// testCtx bounds a test's requests, so that a store that hangs fails the
// test instead of its binary's timeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// httpStatus is the HTTP status of an SDK error, 0 for none.
func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// errorCode is the S3 error code of an SDK error ("" for none).
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func put(ctx context.Context, c *awss3.Client, bucket, key string, body []byte, edit func(*awss3.PutObjectInput)) (*awss3.PutObjectOutput, error) {
	in := &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}
	if edit != nil {
		edit(in)
	}
	return c.PutObject(ctx, in)
}

func get(ctx context.Context, c *awss3.Client, bucket, key string) ([]byte, error) {
	out, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = out.Body.Close() }()
	return io.ReadAll(out.Body)
}

// raceCreateOnly starts n create-only PUTs of key at once, each with its
// own body, and returns the bodies of those that succeeded and every
// failure's status.
func raceCreateOnly(ctx context.Context, t *testing.T, c *awss3.Client, bucket, key string, n int) (won [][]byte, statuses map[int]int) {
	t.Helper()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	statuses = map[int]int{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprintf("racer %d", i))
			<-start
			_, err := put(ctx, c, bucket, key, body, func(in *awss3.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, body)
				return
			}
			statuses[httpStatus(err)]++
			if httpStatus(err) == 0 {
				t.Errorf("racer %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return won, statuses
}

// TestConditionalPuts shows that each store of Stores fences: of 16
// create-only PUTs racing for one key exactly one wins and the others get
// 412, and an If-Match with a wrong ETag is 412 while the right one
// replaces the object.
func TestConditionalPuts(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			ctx := testCtx(t)
			c := s.Client(t, func(o *awss3.Options) { o.RetryMaxAttempts = 1 })
			for round := range 5 {
				key := fmt.Sprintf("race/%d", round)
				won, statuses := raceCreateOnly(ctx, t, c, s.Bucket, key, 16)
				if len(won) != 1 || statuses[http.StatusPreconditionFailed] != 15 {
					t.Fatalf("round %d: %d winners, failures by status %v; want 1 winner and 15 × 412", round, len(won), statuses)
				}
				got, err := get(ctx, c, s.Bucket, key)
				if err != nil || !bytes.Equal(got, won[0]) {
					t.Fatalf("round %d: the object holds %q (%v), the winner wrote %q", round, got, err, won[0])
				}
			}

			out, err := put(ctx, c, s.Bucket, "cas", []byte("v1"), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = put(ctx, c, s.Bucket, "cas", []byte("v2"), func(in *awss3.PutObjectInput) {
				in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`)
			})
			if httpStatus(err) != http.StatusPreconditionFailed {
				t.Fatalf("If-Match with a wrong ETag: %v (status %d), want 412", err, httpStatus(err))
			}
			if _, err := put(ctx, c, s.Bucket, "cas", []byte("v3"), func(in *awss3.PutObjectInput) { in.IfMatch = out.ETag }); err != nil {
				t.Fatalf("If-Match with the right ETag %s: %v", aws.ToString(out.ETag), err)
			}
			if got, err := get(ctx, c, s.Bucket, "cas"); err != nil || string(got) != "v3" {
				t.Fatalf("after the If-Match: %q, %v; want v3", got, err)
			}
		})
	}
}

// TestVersityRoundTrip: the gateway stores, heads and lists an object with
// user metadata, keeping metadata in xattrs (where the file system has
// them, as here) or in a sidecar directory (where it has not).
func TestVersityRoundTrip(t *testing.T) {
	for _, sidecar := range []bool{false, true} {
		t.Run(fmt.Sprintf("sidecar=%v", sidecar), func(t *testing.T) {
			testVersityRoundTrip(t, versity(t, sidecar))
		})
	}
}

func testVersityRoundTrip(t *testing.T, s *Store) {
	ctx := testCtx(t)
	c := s.Client(t)
	if _, err := put(ctx, c, s.Bucket, "a/b", []byte("hello"), func(in *awss3.PutObjectInput) {
		in.Metadata = map[string]string{"streamwal-kind": "data"}
	}); err != nil {
		t.Fatal(err)
	}
	head, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b")})
	if err != nil || head.Metadata["streamwal-kind"] != "data" {
		t.Fatalf("head: %v, metadata %v", err, head.Metadata)
	}
	list, err := c.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String("a/")})
	if err != nil || len(list.Contents) != 1 || aws.ToString(list.Contents[0].Key) != "a/b" {
		t.Fatalf("list: %v, %+v", err, list)
	}
}
