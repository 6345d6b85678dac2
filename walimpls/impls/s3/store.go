package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// Errors of the store seam: a request's HTTP outcome, wrapped around the
// client's error so that the cause stays visible.
var (
	errNotFound     = errors.New("not found")
	errPrecondition = errors.New("precondition failed")
)

// store is the bucket seen through the SDK client: one method per request
// kind, each counted, with 404 and 412 classified.
type store struct {
	c *s3.Client
	// owned is the transport of a client built here (nil with
	// Config.HTTPClient): Close drops its idle connections.
	owned  *http.Transport
	bucket string
	// where names the store in errors: endpoint and bucket.
	where string
	m     *metrics
}

// newClient builds the SDK client of cfg (defaults applied).
func newClient(ctx context.Context, cfg Config) (_ *s3.Client, owned *http.Transport, _ error) {
	retryer := func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = cfg.MaxAttempts
			o.RateLimiter = ratelimit.None
			// 409 ConditionalRequestConflict: a conflicting operation
			// during the upload; AWS says to retry the PUT.
			o.Retryables = append(o.Retryables, retry.RetryableHTTPStatusCode{Codes: map[int]struct{}{409: {}}})
		})
	}
	var ac aws.Config
	if cfg.Credentials != nil {
		ac = aws.Config{Region: cfg.Region, Credentials: cfg.Credentials, Retryer: retryer}
	} else {
		opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(cfg.Region), awsconfig.WithRetryer(retryer)}
		if cfg.CredentialsFile != "" {
			opts = append(opts, awsconfig.WithSharedCredentialsFiles([]string{cfg.CredentialsFile}))
		}
		if cfg.Profile != "" {
			opts = append(opts, awsconfig.WithSharedConfigProfile(cfg.Profile))
		}
		var err error
		ac, err = awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, nil, errors.WithStack(fmt.Errorf("s3: credentials: %w: %w", err, walimpls.ErrInvalidConfig))
		}
	}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		if c.Timeout == 0 {
			c.Timeout = cfg.RequestTimeout
		}
		ac.HTTPClient = &c
	} else {
		// The SDK's transport (with AWS_CA_BUNDLE when the chain loaded
		// one) in a client of ours, so that Close can drop its idle
		// connections.
		tr := awshttp.NewBuildableClient().GetTransport()
		if bc, ok := ac.HTTPClient.(*awshttp.BuildableClient); ok {
			tr = bc.GetTransport()
		}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, nil, errors.WithStack(fmt.Errorf("s3: caFile: %w: %w", err, walimpls.ErrInvalidConfig))
			}
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			roots := tr.TLSClientConfig.RootCAs
			if roots == nil {
				if roots, err = x509.SystemCertPool(); err != nil || roots == nil {
					roots = x509.NewCertPool()
				}
			}
			if !roots.AppendCertsFromPEM(pem) {
				return nil, nil, errors.Wrapf(walimpls.ErrInvalidConfig, "s3: caFile %s holds no PEM certificate", cfg.CAFile)
			}
			tr.TLSClientConfig.RootCAs = roots
		}
		owned = tr
		ac.HTTPClient = &http.Client{Transport: tr, Timeout: cfg.RequestTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	// Checksums only where an operation requires one (DeleteObjects):
	// the object's own CRC-32C covers what matters, and stores that decode
	// only plain or STREAMING-AWS4-HMAC-SHA256-PAYLOAD uploads (gofakes3)
	// are spared trailer-checksum uploads. Verified on gofakes3 over
	// plain HTTP: its tests pass with the SDK's defaults too (there the
	// SDK signs the payload and sends no trailer); over HTTPS not verified.
	ac.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	ac.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	return s3.NewFromConfig(ac, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
	}), owned, nil
}

// statusOf returns the HTTP status of a failed request, 0 without one.
func statusOf(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// said is what the store answered, in a few words: "404 NoSuchBucket:
// ...", or the client's error when no answer came.
func said(err error) string {
	status := statusOf(err)
	var ae smithy.APIError
	if errors.As(err, &ae) {
		s := ae.ErrorCode()
		if msg := ae.ErrorMessage(); msg != "" && msg != s {
			s += ": " + msg
		}
		if status != 0 {
			return strconv.Itoa(status) + " " + s
		}
		return s
	}
	if status != 0 {
		return strconv.Itoa(status) + " " + http.StatusText(status)
	}
	// A transport error: its last part says what happened.
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) && strings.Contains(msg, "operation error") {
		return msg[strings.Index(msg, "operation error"):]
	}
	return msg
}

// classify counts a request and wraps a 404 or 412 into errNotFound or
// errPrecondition.
func (s *store) classify(kind string, err error) error {
	if err == nil {
		s.m.request(kind, resOK)
		return nil
	}
	switch statusOf(err) {
	case http.StatusNotFound:
		s.m.request(kind, res404)
		return fmt.Errorf("%w: %w", errNotFound, err)
	case http.StatusPreconditionFailed:
		s.m.request(kind, res412)
		return fmt.Errorf("%w: %w", errPrecondition, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound") {
		s.m.request(kind, res404)
		return fmt.Errorf("%w: %w", errNotFound, err)
	}
	s.m.request(kind, resError)
	return err
}

// putCond is the condition of a PUT.
type putCond struct {
	createOnly bool   // If-None-Match: *
	ifMatch    string // If-Match: the ETag
}

// put writes body at key under cond and returns the new ETag.
func (s *store) put(ctx context.Context, kind, key string, body []byte, meta map[string]string, cond putCond) (string, error) {
	return s.putBody(ctx, kind, key, bytes.NewReader(body), int64(len(body)), meta, cond)
}

// putBody is put of size bytes read from body, which the SDK seeks back
// to hash it and to retry.
func (s *store) putBody(ctx context.Context, kind, key string, body io.ReadSeeker, size int64, meta map[string]string, cond putCond) (string, error) {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: body, ContentLength: aws.Int64(size), Metadata: meta}
	if cond.createOnly {
		in.IfNoneMatch = aws.String("*")
	}
	if cond.ifMatch != "" {
		in.IfMatch = aws.String(cond.ifMatch)
	}
	out, err := s.c.PutObject(ctx, in)
	if err = s.classify(kind, err); err != nil {
		return "", err
	}
	s.m.putBytes.Add(float64(size))
	return aws.ToString(out.ETag), nil
}

// get reads the object at key whole.
func (s *store) get(ctx context.Context, key string) ([]byte, string, error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err = s.classify(reqGet, err); err != nil {
		return nil, "", err
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if n := aws.ToInt64(out.ContentLength); n > 0 && n < 1<<31 {
		buf.Grow(int(n))
	}
	if _, err := io.Copy(&buf, out.Body); err != nil {
		return nil, "", errors.Wrapf(err, "s3: read %s", key)
	}
	s.m.getBytes.Add(float64(buf.Len()))
	return buf.Bytes(), aws.ToString(out.ETag), nil
}

// head returns the user metadata of key, with lower-cased keys.
func (s *store) head(ctx context.Context, key string) (map[string]string, error) {
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err = s.classify(reqHead, err); err != nil {
		return nil, err
	}
	meta := make(map[string]string, len(out.Metadata))
	for k, v := range out.Metadata {
		meta[strings.ToLower(k)] = v
	}
	return meta, nil
}

// remove deletes keys, up to 1,000 per request; a missing key is deleted.
func (s *store) remove(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		objs := make([]types.ObjectIdentifier, n)
		for i, k := range keys[:n] {
			objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		out, err := s.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket,
			Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)}})
		if err = s.classify(reqDelete, err); err != nil {
			return err
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			return errors.Newf("s3: delete %s: %s: %s", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
		}
		keys = keys[n:]
	}
	return nil
}

// removeOne deletes one key.
func (s *store) removeOne(ctx context.Context, key string) error {
	_, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	return s.classify(reqDelete, err)
}

// list calls fn with every key under prefix, in order.
func (s *store) list(ctx context.Context, prefix string, fn func(key string)) error {
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err = s.classify(reqList, err); err != nil {
			return err
		}
		for _, o := range out.Contents {
			fn(aws.ToString(o.Key))
		}
	}
	return nil
}

// closeIdle drops the idle connections of a client built here.
func (s *store) closeIdle() {
	if s.owned != nil {
		s.owned.CloseIdleConnections()
	}
}

// headBucket checks that the bucket exists and answers us.
func (s *store) headBucket(ctx context.Context) error {
	_, err := s.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if err == nil {
		s.m.request(reqHead, resOK)
		return nil
	}
	s.m.request(reqHead, resError)
	return err
}
