package chain_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/meta"
)

// TestConcurrentMigrationsNeverFork races migrations of one channel to
// different backends, each from its own store client (its own process on
// etcd), and each winner's seal against a finisher sealing the same
// migration with another end: exactly one migration wins, the others get
// a sentinel that says why, both sealers of the winner succeed and agree,
// and the chain is never forked.
func TestConcurrentMigrationsNeverFork(t *testing.T) {
	const rounds = 25
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx := testCtx(t)
		targets := []func(ch string) chain.Backend{
			kafka,
			pulsar,
			func(ch string) chain.Backend { return chain.Backend{Name: "local-ssd", Kind: "local", Channel: ch} },
		}
		stores := make([]*chain.Store, len(targets))
		for i := range stores {
			stores[i] = newStore(open())
		}
		for round := range rounds {
			ch := fmt.Sprintf("ch-%d", round)
			_, err := stores[0].Create(ctx, ch, local, 1)
			require.NoError(t, err)

			var (
				start  = make(chan struct{})
				wg     sync.WaitGroup
				mu     sync.Mutex
				sealed []chain.Chain // every successful seal's answer
				begun  []int         // the contenders whose BeginMigration succeeded
				lost   []error
			)
			for i, target := range targets {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, term := stores[i], int64(5+i)
					<-start
					_, err := s.BeginMigration(ctx, ch, chain.MigrationRequest{Target: target(ch + "-s1"), Term: term, By: "contender-" + strconv.Itoa(i)})
					if err != nil {
						mu.Lock()
						lost = append(lost, err)
						mu.Unlock()
						return
					}
					mu.Lock()
					begun = append(begun, i)
					mu.Unlock()
					var sealers sync.WaitGroup
					for j, sealer := range []*chain.Store{s, stores[(i+1)%len(stores)]} {
						sealers.Add(1)
						go func() {
							defer sealers.Done()
							c, err := sealer.Seal(ctx, ch, chain.SealRequest{Segment: 0, Term: term, End: strconv.Itoa(100 + j), TimeTick: uint64(1000 + j)})
							mu.Lock()
							defer mu.Unlock()
							if err != nil {
								lost = append(lost, errors.Wrap(err, "seal of a begun migration"))
								return
							}
							sealed = append(sealed, c)
						}()
					}
					sealers.Wait()
				}()
			}
			close(start)
			wg.Wait()

			require.Len(t, begun, 1, "round %d: %v", round, lost)
			require.Len(t, lost, len(targets)-1)
			for _, err := range lost {
				require.True(t, errors.Is(err, chain.ErrMigrationPending) || errors.Is(err, chain.ErrSegmentMismatch), "round %d: %v", round, err)
			}
			require.Len(t, sealed, 2)
			require.Equal(t, sealed[0], sealed[1], "both sealers of the winner answer the stored chain")

			winner := begun[0]
			got, err := stores[len(stores)-1].Get(ctx, ch)
			require.NoError(t, err)
			require.Equal(t, sealed[0], got)
			require.Len(t, got.Segments, 2)
			require.Nil(t, got.Pending)
			require.Equal(t, int64(5+winner), got.Segments[0].Seal.Term)
			require.Equal(t, int64(5+winner), got.Segments[1].FirstTerm)
			require.True(t, got.Segments[1].Backend.Equal(targets[winner](ch+"-s1")), "round %d: %s", round, got.Segments[1].Backend)
		}
	})
}

// TestCancelRacesSeal: a cancel and a seal of one migration race; exactly
// one of them happens, and the loser says which.
func TestCancelRacesSeal(t *testing.T) {
	const rounds = 25
	eachStore(t, func(t *testing.T, open func() meta.Store) {
		ctx := testCtx(t)
		canceller, sealer := newStore(open()), newStore(open())
		for round := range rounds {
			ch := fmt.Sprintf("ch-%d", round)
			_, err := sealer.Create(ctx, ch, local, 1)
			require.NoError(t, err)
			_, err = sealer.BeginMigration(ctx, ch, chain.MigrationRequest{Target: kafka(ch + "-s1"), Term: 4, By: "op"})
			require.NoError(t, err)

			var (
				start              = make(chan struct{})
				wg                 sync.WaitGroup
				cancelErr, sealErr error
			)
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_, cancelErr = canceller.CancelMigration(ctx, ch, 0, 4)
			}()
			go func() {
				defer wg.Done()
				<-start
				_, sealErr = sealer.Seal(ctx, ch, chain.SealRequest{Segment: 0, Term: 4, End: "17", TimeTick: 100})
			}()
			close(start)
			wg.Wait()

			got, err := sealer.Get(ctx, ch)
			require.NoError(t, err)
			require.Nil(t, got.Pending)
			if cancelErr == nil {
				require.True(t, errors.Is(sealErr, chain.ErrNoMigration), "round %d: %v", round, sealErr)
				require.Len(t, got.Segments, 1)
			} else {
				require.NoError(t, sealErr, "round %d", round)
				require.True(t, errors.Is(cancelErr, chain.ErrSegmentMismatch), "round %d: %v", round, cancelErr)
				require.Len(t, got.Segments, 2)
			}
		}
	})
}
