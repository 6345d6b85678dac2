package walimplstest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/streamwal/streamwal/walimpls"
)

// Feature is an optional interface of the walimpls contract, which a
// backend implements or not: the suite finds out by type assertion, so a
// method whose signature drifted would silently make a backend one that
// does not implement it. A backend therefore declares what it implements
// (Implements), and the suite fails, instead of skipping, when its
// declaration and its types disagree.
type Feature uint8

const (
	// BatchRead: the backend's WALs are walimpls.BatchReaders (the parts
	// under Batches run).
	BatchRead Feature = iota
	// AsyncAppend: the backend's WALs are walimpls.AsyncAppenders (the
	// parts under Async run).
	AsyncAppend
	// Create: the backend's Openers are walimpls.Creators.
	Create

	featureCount
)

func (f Feature) String() string {
	switch f {
	case BatchRead:
		return "BatchRead"
	case AsyncAppend:
		return "AsyncAppend"
	case Create:
		return "Create"
	}
	return fmt.Sprintf("Feature(%d)", uint8(f))
}

// iface names the interface the feature stands for.
func (f Feature) iface() string {
	switch f {
	case BatchRead:
		return "walimpls.BatchReader"
	case AsyncAppend:
		return "walimpls.AsyncAppender"
	case Create:
		return "walimpls.Creator"
	}
	return f.String()
}

// Implements declares the optional interfaces the backend implements: its
// WALs, of both access modes, are walimpls.BatchReaders (BatchRead) and
// walimpls.AsyncAppenders (AsyncAppend), its Openers walimpls.Creators
// (Create). A backend that implements none of them leaves the option out.
// Several Implements add up.
//
// The declaration is checked, not trusted: DeclaredInterfaces fails when a
// declared interface is missing or an implemented one is not declared, and
// a part under Batches or Async fails when the WAL it opens lacks the
// interface it declares.
func Implements(features ...Feature) Option {
	return func(o *options) {
		for _, f := range features {
			o.features = o.features.with(f)
		}
	}
}

// featureSet is a set of Features.
type featureSet uint8

func (s featureSet) with(f Feature) featureSet { return s | 1<<f }
func (s featureSet) has(f Feature) bool        { return s&(1<<f) != 0 }

func (s featureSet) String() string {
	var names []string
	for f := range featureCount {
		if s.has(f) {
			names = append(names, f.String())
		}
	}
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, ", ")
}

// undeclaredSkip is why the parts under group are skipped.
func undeclaredSkip(f Feature, group string) string {
	return fmt.Sprintf("the backend does not declare %s (walimplstest.Implements): its WALs are not %ss, nothing to check under %s",
		f, f.iface(), group)
}

// implements reports whether v implements f's interface.
func implements(f Feature, v any) bool {
	var ok bool
	switch f {
	case BatchRead:
		_, ok = v.(walimpls.BatchReader)
	case AsyncAppend:
		_, ok = v.(walimpls.AsyncAppender)
	case Create:
		_, ok = v.(walimpls.Creator)
	}
	return ok
}

// testDeclaredInterfaces checks that what the backend declares through
// Implements is what its Opener and its WALs (ReadWrite and ReadOnly)
// implement, both ways: a declared interface that is missing would turn
// the parts that check it into skips, and one implemented but not declared
// would go unchecked.
func testDeclaredInterfaces(t *testing.T, e *env) {
	o := e.opener()
	name := channelName("declared")
	rw := e.open(o, name, 1, walimpls.ReadWrite)
	ro := e.open(e.opener(), name, 0, walimpls.ReadOnly)
	check := func(f Feature, what string, v any) {
		t.Helper()
		declared, has := e.opts.features.has(f), implements(f, v)
		switch {
		case declared && !has:
			t.Errorf("the backend declares %s, but its %s (%T) is not a %s: a method missing or with another signature",
				f, what, v, f.iface())
		case !declared && has:
			t.Errorf("the backend's %s (%T) is a %s, but the backend does not declare %s: pass walimplstest.Implements(walimplstest.%s) to Run",
				what, v, f.iface(), f, f)
		}
	}
	check(Create, "Opener", o)
	for _, w := range []walimpls.WALImpl{rw, ro} {
		what := fmt.Sprintf("%s WAL", w.Channel().Mode)
		check(BatchRead, what, w)
		check(AsyncAppend, what, w)
	}
	t.Logf("declared: %s", e.opts.features)
}
