package claimown

import "context"

// Claim is one term claim, as a backend decoded it. Nonce identifies the
// open that wrote it (a Kafka [16]byte, a Pulsar hex string). Terms are
// non-negative; a Claim of Term -1 stands for "no claim yet", which every
// claim beats.
type Claim[N comparable] struct {
	Term  int64
	Nonce N
	// Deletion marks the claim Opener.Delete writes: it wins over every
	// claim, and nothing written after it counts.
	Deletion bool
}

// NoClaim is the winner of an empty set of claims: every claim beats it.
func NoClaim[N comparable]() Claim[N] { return Claim[N]{Term: -1} }

// Beats reports whether c, written after the claims whose winner is w,
// becomes the winner: a deletion claim beats every claim and no claim
// beats it; otherwise the higher term wins, and the later claim among
// equal terms. Folding the claims in the order they were written with
// Beats, from NoClaim, yields the claim that owns the channel.
func (c Claim[N]) Beats(w Claim[N]) bool {
	return !w.Deletion && (c.Deletion || c.Term >= w.Term)
}

// Steps are the steps of taking a writer's exclusive resource (of type
// T) once its claim is written; see Acquire.
type Steps[T any] struct {
	// Precheck, when set, runs first: it fails unless the writer's claim
	// wins, so that a stale writer does not disturb the owner (fence its
	// producer, unload its topic). An open leaves it nil: its claim was
	// just written, and taking the resource is what fences the older
	// owner.
	Precheck func(context.Context) error
	// Take takes the resource; it fails without holding anything.
	Take func(context.Context) (T, error)
	// Check fails unless the writer's claim wins.
	Check func(context.Context) error
	// Release gives back a resource that Check refused.
	Release func(T)
}

// Acquire takes the resource and keeps it only if the writer's claim
// still wins after it was taken: Precheck (if set), Take, Check, and
// Release when Check fails. The error is the first step's that failed,
// unchanged.
func Acquire[T any](ctx context.Context, s Steps[T]) (T, error) {
	var zero T
	if s.Precheck != nil {
		if err := s.Precheck(ctx); err != nil {
			return zero, err
		}
	}
	r, err := s.Take(ctx)
	if err != nil {
		return zero, err
	}
	if err := s.Check(ctx); err != nil {
		s.Release(r)
		return zero, err
	}
	return r, nil
}
