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
	mock_walmanager "github.com/streamwal/streamwal/mocks/walmanager"
	"github.com/streamwal/streamwal/walmanager"
)

// The user code under test: a node's order service. It takes a
// walmanager.WALManager (the interface *walmanager.Manager implements), so a
// test can hand it the generated mock (mocks/walmanager) instead of a
// manager over a backend.

// errNotServedHere tells the caller to ask the channel's current owner:
// this node does not serve the channel at that term (another term is
// assigned here, or its WAL is not open or was fenced).
var errNotServedHere = errors.New("channel not served here at that term")

type orderService struct {
	wals walmanager.WALManager
}

// place appends order to the WAL of ch, if this node serves ch at its term.
func (s orderService) place(ctx context.Context, ch walmanager.Channel, order string) (adaptor.AppendResult, error) {
	w, err := s.wals.GetAvailableWAL(ch)
	switch {
	case errors.Is(err, walmanager.ErrTermMismatch), errors.Is(err, walmanager.ErrChannelNotAvailable):
		return adaptor.AppendResult{}, fmt.Errorf("place order on %s@%d: %w: %w", ch.Name, ch.Term, errNotServedHere, err)
	case err != nil:
		return adaptor.AppendResult{}, fmt.Errorf("place order on %s@%d: %w", ch.Name, ch.Term, err)
	}
	m, err := message.New([]byte(order), nil)
	if err != nil {
		return adaptor.AppendResult{}, err
	}
	return w.Append(ctx, m)
}

// TestOrderService unit-tests place against the manager's mock: each case
// states what GetAvailableWAL answers and, when it hands out a WAL (itself
// a mock), the Append it expects. Every mock is built with its NewMockX(t)
// constructor: a call the case did not expect fails the test at once,
// naming the call, and an expected call that never came fails it at
// cleanup.
func TestOrderService(t *testing.T) {
	ch := walmanager.Channel{Name: "orders", Term: 3}
	stored := adaptor.AppendResult{ID: message.NewSeqID("local", 7), TimeTick: 42}
	for _, tc := range []struct {
		name      string
		getErr    error // what GetAvailableWAL answers; nil hands out a WAL
		wantErr   error // nil: success
		notServed bool  // the error is errNotServedHere
	}{
		{name: "served", getErr: nil},
		{name: "other term", getErr: walmanager.ErrTermMismatch, wantErr: walmanager.ErrTermMismatch, notServed: true},
		{name: "fenced", getErr: walmanager.ErrChannelNotAvailable, wantErr: walmanager.ErrChannelNotAvailable, notServed: true},
		{name: "shutting down", getErr: walmanager.ErrManagerClosed, wantErr: walmanager.ErrManagerClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mgr := mock_walmanager.NewMockWALManager(t)
			if tc.getErr != nil {
				mgr.EXPECT().GetAvailableWAL(ch).Return(nil, tc.getErr).Once()
			} else {
				w := mock_adaptor.NewMockWAL(t)
				w.EXPECT().Append(mock.Anything, mock.MatchedBy(func(m message.Message) bool {
					return string(m.Payload()) == "2 apples"
				})).Return(stored, nil).Once()
				mgr.EXPECT().GetAvailableWAL(ch).Return(w, nil).Once()
			}

			got, err := orderService{wals: mgr}.place(context.Background(), ch, "2 apples")
			if tc.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, stored, got)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, tc.notServed, errors.Is(err, errNotServedHere))
		})
	}
}
