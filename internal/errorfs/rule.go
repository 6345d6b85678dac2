package errorfs

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Error is the error a Rule injects. It matches ErrInjected and unwraps to
// its cause.
type Error struct {
	cause error
	torn  bool
}

func (e *Error) Error() string {
	if e.cause == nil {
		return ErrInjected.Error()
	}
	return "errorfs: injected: " + e.cause.Error()
}

// Is matches ErrInjected.
func (e *Error) Is(target error) bool { return target == ErrInjected }

// Unwrap returns the cause the Rule was made with (nil for none).
func (e *Error) Unwrap() error { return e.cause }

// Rule is an Injector that fails the operations matching all of its
// filters. Configure it (the methods return the Rule, to chain them)
// before the FS uses it; from then on it is safe for concurrent use.
type Rule struct {
	err   *Error
	ops   uint32 // bit i: Op i; 0: every op
	paths []string
	where []func(Info) bool
	nth   int64
	prob  float64

	seen atomic.Int64 // operations that matched the filters

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

// Fail returns a Rule failing every operation with an error wrapping cause
// (a syscall.Errno such as syscall.ENOSPC, as a full disk would; nil for
// ErrInjected alone), until filters narrow it down.
func Fail(cause error) *Rule {
	return &Rule{err: &Error{cause: cause}}
}

// On narrows r to the operations of the given kinds.
func (r *Rule) On(ops ...Op) *Rule {
	for _, op := range ops {
		r.ops |= 1 << op
	}
	return r
}

// Path narrows r to the paths that match one of the globs (path.Match
// syntax). A glob with a path separator is matched against the full path,
// one without against the base name: "wal-*.log" matches every segment in
// any directory.
func (r *Rule) Path(globs ...string) *Rule {
	r.paths = append(r.paths, globs...)
	return r
}

// Where narrows r to the operations pred accepts. pred is called
// concurrently, and only for operations the other filters accept.
func (r *Rule) Where(pred func(Info) bool) *Rule {
	r.where = append(r.where, pred)
	return r
}

// Nth narrows r to the n-th operation (counting from 1) that its other
// filters accept, the probability excepted: it fails that one only.
func (r *Rule) Nth(n int) *Rule {
	r.nth = int64(n)
	return r
}

// Prob narrows r to a fraction p of the operations its other filters accept,
// drawn from a generator seeded with seed: the same seed fails the same
// operations of the same sequence.
func (r *Rule) Prob(p float64, seed uint64) *Rule {
	r.prob = p
	r.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return r
}

// Torn makes a failed write land the first half of its bytes, as a write
// cut short by a full disk or a crash may. Other operations are unaffected.
func (r *Rule) Torn() *Rule {
	r.err.torn = true
	return r
}

// Inject fails i when it matches every filter of r.
func (r *Rule) Inject(i Info) error {
	if r.ops != 0 && r.ops&(1<<i.Op) == 0 {
		return nil
	}
	if len(r.paths) > 0 && !matchAny(r.paths, i.Path) {
		return nil
	}
	for _, pred := range r.where {
		if !pred(i) {
			return nil
		}
	}
	n := r.seen.Add(1)
	if r.nth != 0 && n != r.nth {
		return nil
	}
	if r.rng != nil {
		r.mu.Lock()
		draw := r.rng.Float64()
		r.mu.Unlock()
		if draw >= r.prob {
			return nil
		}
	}
	return r.err
}

// Matched returns how many operations matched r's filters so far (before
// Nth and Prob chose among them).
func (r *Rule) Matched() int64 { return r.seen.Load() }

func matchAny(globs []string, path string) bool {
	for _, g := range globs {
		name := path
		if !strings.ContainsRune(g, filepath.Separator) {
			name = filepath.Base(path)
		}
		if ok, _ := filepath.Match(g, name); ok {
			return true
		}
	}
	return false
}

// Switch is an Injector that asks its injector only while it is on: a test
// arms a fault, sees it hit, and heals the disk. It starts off.
type Switch struct {
	inj Injector
	on  atomic.Bool
}

// NewSwitch returns a Switch, off, over inj.
func NewSwitch(inj Injector) *Switch { return &Switch{inj: inj} }

// Set turns s on or off.
func (s *Switch) Set(on bool) { s.on.Store(on) }

// On reports whether s is on.
func (s *Switch) On() bool { return s.on.Load() }

// Inject asks s's injector while s is on.
func (s *Switch) Inject(i Info) error {
	if !s.on.Load() {
		return nil
	}
	return s.inj.Inject(i)
}
