package examples_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/adaptor"
	"github.com/streamwal/streamwal/message"
	mock_adaptor "github.com/streamwal/streamwal/mocks/adaptor"
	"github.com/streamwal/streamwal/walimpls"
)

// The user code under test: it takes an adaptor.WAL, so a test can hand it
// the generated mock (mocks/adaptor) instead of a real WAL.

// errNotLeader tells the caller to stop publishing here: another node owns
// the channel now.
var errNotLeader = errors.New("not the leader of the channel any more")

// publish appends an order, keyed by its id, and tells a lost leadership
// (the WAL was fenced by a higher term) apart from other failures.
func publish(ctx context.Context, w adaptor.WAL, id, order string) (adaptor.AppendResult, error) {
	m, err := message.New([]byte(order), map[string]string{"order-id": id})
	if err != nil {
		return adaptor.AppendResult{}, err
	}
	r, err := w.Append(ctx, m)
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, walimpls.ErrFenced):
		return adaptor.AppendResult{}, fmt.Errorf("publish order %s: %w: %w", id, errNotLeader, err)
	default:
		return adaptor.AppendResult{}, fmt.Errorf("publish order %s: %w", id, err)
	}
}

// TestPublisher unit-tests publish against the mock: each case states the
// one Append it expects (with the message it must carry) and what the WAL
// answers. The mock fails the test on an unexpected call, and, at cleanup,
// on an expected call that never came.
func TestPublisher(t *testing.T) {
	stored := adaptor.AppendResult{ID: message.NewSeqID("local", 7), TimeTick: 42}
	fenced := walimpls.MarkNotStored(&walimpls.FencedError{Channel: "orders", Term: 1, CurrentTerm: 2})
	full := errors.New("disk full")
	for _, tc := range []struct {
		name      string
		result    adaptor.AppendResult // what the WAL answers
		err       error
		want      adaptor.AppendResult
		wantErr   error // nil: success
		notLeader bool  // the error is errNotLeader
	}{
		{name: "stored", result: stored, want: stored},
		{name: "fenced", err: fenced, notLeader: true, wantErr: walimpls.ErrFenced},
		{name: "other failure", err: full, wantErr: full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := mock_adaptor.NewMockWAL(t)
			w.EXPECT().Append(mock.Anything, mock.MatchedBy(func(m message.Message) bool {
				id, _ := m.Properties().Get("order-id")
				return id == "o-1" && string(m.Payload()) == "2 apples"
			})).Return(tc.result, tc.err).Once()

			got, err := publish(context.Background(), w, "o-1", "2 apples")
			if tc.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, tc.notLeader, errors.Is(err, errNotLeader))
		})
	}
}
