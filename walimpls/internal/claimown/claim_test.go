package claimown

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// winner folds cs in the order they were written, as the backends do.
func winner(cs []Claim[string]) (Claim[string], bool) {
	w := NoClaim[string]()
	for _, c := range cs {
		if c.Beats(w) {
			w = c
		}
	}
	return w, w.Term >= 0
}

func TestWinner(t *testing.T) {
	c := func(term int64, nonce string) Claim[string] { return Claim[string]{Term: term, Nonce: nonce} }
	del := func(nonce string) Claim[string] {
		return Claim[string]{Term: math.MaxInt64, Nonce: nonce, Deletion: true}
	}
	for _, tc := range []struct {
		name   string
		claims []Claim[string]
		want   string // the winner's nonce; "" for none
	}{
		{"none", nil, ""},
		{"one", []Claim[string]{c(3, "a")}, "a"},
		{"term zero", []Claim[string]{c(0, "a")}, "a"},
		{"higher term later", []Claim[string]{c(3, "a"), c(4, "b")}, "b"},
		{"higher term earlier", []Claim[string]{c(4, "a"), c(3, "b")}, "a"},
		{"same term: the later", []Claim[string]{c(3, "a"), c(3, "b")}, "b"},
		{"same term after a lower", []Claim[string]{c(3, "a"), c(2, "b"), c(3, "c")}, "c"},
		{"same term again after a higher", []Claim[string]{c(3, "a"), c(5, "b"), c(3, "c")}, "b"},
		{"deletion last", []Claim[string]{c(3, "a"), del("d")}, "d"},
		{"deletion first", []Claim[string]{del("d"), c(3, "a")}, "d"},
		{"nothing after a deletion counts", []Claim[string]{c(3, "a"), del("d"), c(math.MaxInt64, "late")}, "d"},
		{"the first deletion stays", []Claim[string]{del("d1"), del("d2")}, "d1"},
		{"deletion beats the highest term", []Claim[string]{c(math.MaxInt64, "a"), del("d")}, "d"},
		{"a max term without the mark is a claim", []Claim[string]{c(math.MaxInt64, "a"), c(math.MaxInt64, "b")}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, ok := winner(tc.claims)
			if tc.want == "" {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.want, w.Nonce)
		})
	}
}

func TestBeats(t *testing.T) {
	none, low, high := NoClaim[int](), Claim[int]{Term: 1, Nonce: 1}, Claim[int]{Term: 2, Nonce: 2}
	del := Claim[int]{Term: math.MaxInt64, Nonce: 9, Deletion: true}
	assert.True(t, low.Beats(none), "every claim beats no claim")
	assert.True(t, del.Beats(none))
	assert.True(t, high.Beats(low))
	assert.False(t, low.Beats(high))
	assert.True(t, low.Beats(low), "a later claim of the same term wins")
	assert.True(t, del.Beats(high))
	assert.False(t, high.Beats(del))
	assert.False(t, del.Beats(del), "the first deletion stays the winner")
}

// resource is what TestAcquire takes: it records the steps.
type resource struct{ released bool }

func TestAcquire(t *testing.T) {
	errPre, errTake, errCheck := errors.New("precheck"), errors.New("take"), errors.New("check")
	for _, tc := range []struct {
		name                 string
		precheck             bool
		failPre, failTake    bool
		failCheck            bool
		wantErr              error
		wantSteps            string
		wantTakenAndReleased bool
		wantHeld             bool
	}{
		{name: "no precheck", wantSteps: "take check", wantHeld: true},
		{name: "precheck", precheck: true, wantSteps: "pre take check", wantHeld: true},
		{name: "precheck fails", precheck: true, failPre: true, wantErr: errPre, wantSteps: "pre"},
		{name: "take fails", precheck: true, failTake: true, wantErr: errTake, wantSteps: "pre take"},
		{name: "check fails: released", failCheck: true, wantErr: errCheck, wantSteps: "take check release", wantTakenAndReleased: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var steps []string
			var taken *resource
			fail := func(b bool, err error) error {
				if b {
					return err
				}
				return nil
			}
			s := Steps[*resource]{
				Take: func(context.Context) (*resource, error) {
					steps = append(steps, "take")
					if tc.failTake {
						return nil, errTake
					}
					taken = &resource{}
					return taken, nil
				},
				Check: func(context.Context) error {
					steps = append(steps, "check")
					return fail(tc.failCheck, errCheck)
				},
				Release: func(r *resource) {
					steps = append(steps, "release")
					r.released = true
				},
			}
			if tc.precheck {
				s.Precheck = func(context.Context) error {
					steps = append(steps, "pre")
					return fail(tc.failPre, errPre)
				}
			}
			got, err := Acquire(context.Background(), s)
			require.ErrorIs(t, err, tc.wantErr)
			assert.Equal(t, tc.wantSteps, join(steps))
			if tc.wantHeld {
				require.NotNil(t, got)
				assert.Same(t, taken, got)
				assert.False(t, got.released)
			} else {
				assert.Nil(t, got)
			}
			if tc.wantTakenAndReleased {
				require.NotNil(t, taken)
				assert.True(t, taken.released)
			}
		})
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
