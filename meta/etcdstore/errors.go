package etcdstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/internal/storeerr"
)

// classify marks err, an error of a call whose caller's context is ctx,
// with the meta sentinel callers branch on, keeping err as the cause (see
// doc.go, Errors).
func classify(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled) {
		return err // the caller gave up: its own error, unmarked
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return storeerr.Mark(err, meta.ErrUnavailable)
	}
	code, fromServer := grpcCode(err)
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return storeerr.Mark(err, meta.ErrUnavailable)
	case codes.ResourceExhausted:
		if fromServer {
			return storeerr.Mark(err, meta.ErrUnavailable) // no space, too many requests
		}
		return storeerr.Mark(err, meta.ErrInvalid) // the client's message size limit
	case codes.InvalidArgument:
		return storeerr.Mark(err, meta.ErrInvalid)
	}
	if errors.Is(err, context.Canceled) {
		return storeerr.Mark(err, meta.ErrUnavailable) // the client's context: a closed client
	}
	return err
}

// grpcCode is the gRPC code of an etcd client error (codes.Unknown if it
// has none), and whether it is one of etcd's server errors.
func grpcCode(err error) (codes.Code, bool) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code(), true
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Code(), false
	}
	return codes.Unknown, false
}
