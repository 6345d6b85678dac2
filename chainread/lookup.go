package chainread

import (
	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/chain"
	"github.com/streamwal/streamwal/walimpls"
)

// LookupFunc finds a backend entry by name: its kind (the registered
// backend's name) and its opener; ok is false when there is no such entry.
// It turns a plain table of started backends (a test's, say) into what a
// chain needs, so that the table's owner need not know chains: Openers,
// checking the kind the chain recorded, and Describe for
// chainwal.Config.Describe. Entries carry no Params; a table whose entries
// locate their data by Params (a node's configuration) checks them itself.
type LookupFunc func(name string) (kind string, o walimpls.Opener, ok bool)

var _ Openers = LookupFunc(nil)

// Opener implements Openers: the opener of the entry b.Name when it is of
// kind b.Kind, else an error matching ErrNoOpener.
func (f LookupFunc) Opener(b chain.Backend) (walimpls.Opener, error) {
	kind, o, ok := f(b.Name)
	if !ok || o == nil || kind != b.Kind {
		return nil, errors.Wrapf(ErrNoOpener, "no entry %q of kind %s (channel %s)", b.Name, b.Kind, b.Channel)
	}
	return o, nil
}

// Describe returns what a chain records of the entry name: its Name and
// Kind, with Channel empty for the caller to set. An unknown name is an
// error matching ErrNoOpener.
func (f LookupFunc) Describe(name string) (chain.Backend, error) {
	kind, _, ok := f(name)
	if !ok {
		return chain.Backend{}, errors.Wrapf(ErrNoOpener, "no entry %q", name)
	}
	return chain.Backend{Name: name, Kind: kind}, nil
}
