package kafka

import (
	"context"
	stderrors "errors"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/streamwal/streamwal/walimpls"
)

// TestRetryKeepsContextAndLastError: a retry that ends with its context
// fails with the context's error and the last attempt's, and errors.Is (the
// standard one and cockroachdb's) matches both. An attempt that the end of
// the context cut short does not hide the broker's answer before it.
func TestRetryKeepsContextAndLastError(t *testing.T) {
	broker := errors.New("broker: not the leader")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attempts := 0
	err := retry(ctx, func() error {
		attempts++
		switch attempts {
		case 1:
			return broker
		case 2:
			return errRetry // not an error to report: the last one stays
		}
		cancel()
		return errors.Wrap(ctx.Err(), "fetch")
	})
	require.Equal(t, 3, attempts)
	require.EqualError(t, err, "context canceled (last attempt: broker: not the leader)")
	for _, target := range []error{context.Canceled, broker} {
		require.True(t, errors.Is(err, target), "cockroachdb errors.Is matches %v", target)
		require.True(t, stderrors.Is(err, target), "the standard errors.Is matches %v", target)
	}

	// An attempt cut short with nothing before it is the last attempt.
	ctx, cancel = context.WithCancel(context.Background())
	err = retry(ctx, func() error {
		cancel()
		return errors.Wrap(ctx.Err(), "fetch")
	})
	require.EqualError(t, err, "context canceled (last attempt: fetch: context canceled)")

	// Nothing to report but the context's end.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	err = retry(ctx, func() error { return errRetry })
	require.Same(t, context.Canceled, err)

	// A permanent error stops at once, unchanged.
	err = retry(context.Background(), func() error { return errPermanent{broker} })
	require.ErrorIs(t, err, broker)
}

// TestNewTimesOutWithTheBrokersError: New gives up learning the broker's
// message size limit after CreateTimeout; its error names the broker's
// last answer, and matches it as well as the context's deadline.
func TestNewTimesOutWithTheBrokersError(t *testing.T) {
	c := newCluster(t)
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.(*kmsg.DescribeConfigsRequest).Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			rr.ErrorCode = kerr.PolicyViolation.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	cfg := testConfig(c)
	cfg.CreateTimeout = 200 * time.Millisecond
	o, err := New(context.Background(), cfg, walimpls.WithLogger(testLogger()))
	if err == nil {
		_ = o.Close()
	}
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, kerr.PolicyViolation)
	require.Contains(t, err.Error(), kerr.PolicyViolation.Message)
}
