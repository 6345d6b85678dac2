package walconfig

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/chainread"
	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/walimpls"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrUnknownEntry means a backend name is no entry of the
	// configuration. Backends.Opener's error for it also matches
	// chainread.ErrNoOpener.
	ErrUnknownEntry = errors.New("selector: no such backend entry")
	// ErrBackendMismatch means a chain recorded a backend that the
	// configuration's entry of the same name contradicts: another kind, or
	// Params that locate the data elsewhere. A node reopens a segment from
	// what is recorded: fix the configuration entry.
	ErrBackendMismatch = errors.New("selector: configuration entry contradicts the recorded backend")
)

// Backends are the Openers of every entry of a configuration, built by
// BuildAll. They are safe for concurrent use; the caller owns them and
// closes them with Close.
type Backends struct {
	def string
	// order is the entries' names, sorted: the order they were built in.
	order   []string
	entries map[string]builtEntry

	closeOnce sync.Once
	closeErr  error
}

// builtEntry is an entry's Opener and what Describe says of it.
type builtEntry struct {
	b    *Backend
	desc chain.Backend // Channel empty
	// where is the entry's place in the file, for messages.
	where string
}

var _ chainread.Openers = (*Backends)(nil)

// BuildAll builds the Opener of every entry of c (the one entry of a file
// without backends), in the order of their names, with the builder of each
// entry's kind in d.Registry. Its errors are Build's, naming the entry and
// its line; when one fails, the Openers already built are closed. Two
// entries whose Params are equal and not empty (the same data, such as
// two local entries on one directory) are refused before any is built.
//
// Each entry's logs carry a "backend" attribute, and its metrics a
// "backend" label, with the entry's name, so that entries of one kind can
// share d.Registerer. Entries of kind memory share the cluster of the
// Registry's memory backend.
func BuildAll(ctx context.Context, c Config, d Deps) (*Backends, error) {
	reg, err := d.registry()
	if err != nil {
		return nil, err
	}
	bs := &Backends{def: c.Default(), entries: map[string]builtEntry{}}
	names := c.entryNames()
	descs := make([]chain.Backend, len(names))
	for i, name := range names {
		e, _ := c.entry(name)
		p, err := c.params(e)
		if err != nil {
			return nil, err
		}
		descs[i] = chain.Backend{Name: name, Kind: e.kind, Params: p}
	}
	if err := c.checkDistinct(descs); err != nil {
		return nil, err
	}
	for i, name := range names {
		e, _ := c.entry(name)
		logger, registerer := d.Logger, d.Registerer
		if logger != nil {
			logger = logger.With("backend", name)
		}
		if registerer != nil {
			registerer = prometheus.WrapRegistererWith(prometheus.Labels{"backend": name}, registerer)
		}
		b, err := c.build(ctx, reg, e, logger, registerer)
		if err != nil {
			if cerr := bs.Close(); cerr != nil {
				err = errors.WithSecondaryError(err, cerr)
			}
			return nil, err
		}
		bs.order = append(bs.order, name)
		bs.entries[name] = builtEntry{b: b, desc: descs[i], where: c.where(e)}
	}
	return bs, nil
}

// checkDistinct refuses two entries that locate the same data: equal kind
// and Params, Params not empty.
func (c Config) checkDistinct(descs []chain.Backend) error {
	for i, a := range descs {
		if len(a.Params) == 0 {
			continue
		}
		for _, b := range descs[:i] {
			if same, err := sameParams(a.Params, b.Params); err == nil && same && a.Kind == b.Kind {
				e, _ := c.entry(a.Name)
				return &ConfigError{File: c.file, Line: e.line(), Path: e.path,
					Msg: fmt.Sprintf("locates the same data as entry %q (kind %s, params %s): give each place one entry", b.Name, a.Kind, a.Params)}
			}
		}
	}
	return nil
}

// where is e's place in the file for a message: "node.yaml:5", "line 5",
// or the file's name.
func (c Config) where(e entry) string {
	switch l := e.line(); {
	case c.file != "" && l > 0:
		return fmt.Sprintf("%s:%d", c.file, l)
	case l > 0:
		return fmt.Sprintf("line %d", l)
	case c.file != "":
		return c.file
	}
	return "the configuration"
}

// Default returns the default entry's name: where channels without a chain
// begin (Config.Default).
func (bs *Backends) Default() string { return bs.def }

// Names returns the entries' names, sorted.
func (bs *Backends) Names() []string { return slices.Clone(bs.order) }

// Entry returns the Opener of the entry name.
func (bs *Backends) Entry(name string) (*Backend, bool) {
	be, ok := bs.entries[name]
	return be.b, ok
}

// Describe returns what a chain records of the entry name (its Name, Kind
// and Params; see the package documentation for the Params of each kind),
// with Channel empty for the caller to set. An unknown name is an error
// matching ErrUnknownEntry.
func (bs *Backends) Describe(name string) (chain.Backend, error) {
	be, ok := bs.entries[name]
	if !ok {
		return chain.Backend{}, errors.Wrapf(ErrUnknownEntry, "selector: backend %q%s", name, entriesHint(name, bs.order))
	}
	d := be.desc
	d.Params = bytes.Clone(d.Params)
	return d, nil
}

// Opener implements chainread.Openers: it returns the Opener of the entry
// b.Name once the entry agrees with what the chain recorded. A name that
// is no entry is an error matching both ErrUnknownEntry and
// chainread.ErrNoOpener; an entry of another kind than b.Kind, or whose
// Params differ from b.Params as JSON values (empty Params being the empty
// object), is an error matching ErrBackendMismatch that names the entry,
// what the chain recorded and what the configuration says.
func (bs *Backends) Opener(b chain.Backend) (walimpls.Opener, error) {
	be, ok := bs.entries[b.Name]
	if !ok {
		err := errors.Wrapf(chainread.ErrNoOpener, "selector: the chain names backend %q (kind %s, channel %s), which the configuration does not have%s",
			b.Name, b.Kind, b.Channel, entriesHint(b.Name, bs.order))
		return nil, errmark.Mark(err, ErrUnknownEntry)
	}
	same, perr := sameParams(b.Params, be.desc.Params)
	if b.Kind == be.desc.Kind && perr == nil && same {
		return be.b, nil
	}
	recorded := fmt.Sprintf("kind %s, params %s", b.Kind, showParams(b.Params))
	if perr != nil {
		recorded = fmt.Sprintf("kind %s, %v", b.Kind, perr)
	}
	return nil, errors.Wrapf(ErrBackendMismatch,
		"selector: backend %q (channel %s): the chain recorded %s; the configuration's entry (%s) says kind %s, params %s: "+
			"a node reopens a segment from what is recorded; fix the configuration entry %q",
		b.Name, b.Channel, recorded, be.where, be.desc.Kind, showParams(be.desc.Params), b.Name)
}

// Close closes every entry's Opener, the last built first, and returns
// their errors joined. Later calls return the same.
func (bs *Backends) Close() error {
	bs.closeOnce.Do(func() {
		var errs []error
		for i := len(bs.order) - 1; i >= 0; i-- {
			name := bs.order[i]
			if err := bs.entries[name].b.Close(); err != nil {
				errs = append(errs, errors.Wrapf(err, "selector: close backend %q", name))
			}
		}
		bs.closeErr = errors.Join(errs...)
	})
	return bs.closeErr
}
