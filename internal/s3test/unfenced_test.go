package s3test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestIgnoringConditions: every racer wins, and a wrong If-Match replaces
// the object.
func TestIgnoringConditions(t *testing.T) {
	s := FakeIgnoringConditions(t)
	ctx := testCtx(t)
	c := s.Client(t, noRetries)
	won, statuses := raceCreateOnly(ctx, t, c, s.Bucket, "race", 16)
	if len(won) != 16 {
		t.Fatalf("%d of 16 racers won (failures by status %v), want all", len(won), statuses)
	}
	if _, err := put(ctx, c, s.Bucket, "race", []byte("x"), func(in *awss3.PutObjectInput) {
		in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`)
	}); err != nil {
		t.Fatalf("If-Match with a wrong ETag: %v, want it written", err)
	}
}

// TestNonAtomic: the first racers create-only PUTs of a key all win, the
// ones after them that come too late get 412, and a single If-Match is
// checked as it should be.
func TestNonAtomic(t *testing.T) {
	for _, racers := range []int{2, 4} {
		s := FakeNonAtomic(t, racers)
		ctx := testCtx(t)
		c := s.Client(t, noRetries)
		won, statuses := raceCreateOnly(ctx, t, c, s.Bucket, "race", 16)
		if len(won) < racers || len(won)+statuses[http.StatusPreconditionFailed] != 16 {
			t.Fatalf("racers %d: %d of 16 won, failures by status %v; want at least %d winners and 412 for the others",
				racers, len(won), statuses, racers)
		}
		t.Logf("racers %d: %d of 16 won", racers, len(won))

		// The key exists now: a create-only PUT fails at once.
		if _, err := put(ctx, c, s.Bucket, "race", []byte("x"), func(in *awss3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }); httpStatus(err) != http.StatusPreconditionFailed {
			t.Fatalf("create-only PUT of an existing key: %v, want 412", err)
		}
		head, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("race")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := put(ctx, c, s.Bucket, "race", []byte("x"), func(in *awss3.PutObjectInput) {
			in.IfMatch = aws.String(`"0123456789abcdef0123456789abcdef"`)
		}); httpStatus(err) != http.StatusPreconditionFailed {
			t.Fatalf("If-Match with a wrong ETag: %v, want 412", err)
		}
		// The key's window is past: a lone If-Match that holds is written.
		if _, err := put(ctx, c, s.Bucket, "race", []byte("y"), func(in *awss3.PutObjectInput) { in.IfMatch = head.ETag }); err != nil {
			t.Fatalf("If-Match with the right ETag: %v", err)
		}
		if got, err := get(ctx, c, s.Bucket, "race"); err != nil || string(got) != "y" {
			t.Fatalf("after the If-Match: %q, %v", got, err)
		}
	}
}
