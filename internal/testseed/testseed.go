// Package testseed gives a randomized test its seed and logs it, so that a
// failure can be replayed:
//
//	STREAMWAL_TEST_SEED=<seed from the log> go test -run '^TestName$' ./pkg
//
// Without the variable each call draws a fresh seed.
package testseed

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// Env names the environment variable that fixes the seed.
const Env = "STREAMWAL_TEST_SEED"

// Seed returns the seed of tb's randomness, from Env when it is set, else a
// fresh one, and logs it (shown when tb fails or runs with -v).
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	if s := os.Getenv(Env); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("testseed: %s=%q is not an unsigned 64-bit integer", Env, s)
		}
		tb.Logf("seed %d (from %s)", seed, Env)
		return seed
	}
	seed := rand.Uint64()
	tb.Logf("seed %d (replay with %s=%d)", seed, Env, seed)
	return seed
}
