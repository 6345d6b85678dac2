package etcdstore

import (
	"time"

	"github.com/cockroachdb/errors"
)

// Options tunes a Store. The zero value is the default: no prefix, a 5 s
// request timeout.
type Options struct {
	// Prefix namespaces the store: every key is stored under Prefix + key,
	// and returned without it. Choose prefixes of which none is a prefix of
	// another (ending them in "/" does that), or stores will see each other's
	// keys. Empty: the whole keyspace.
	Prefix string
	// RequestTimeout bounds each call, on top of the caller's context; when
	// it passes the call fails with meta.ErrUnavailable. Zero means
	// DefaultRequestTimeout; it must not be negative.
	RequestTimeout time.Duration
	// ListPageSize is how many keys List asks for per request (all pages
	// are read at one revision). Zero means DefaultListPageSize; it must
	// not be negative.
	ListPageSize int
}

// Defaults of Options.
const (
	DefaultRequestTimeout = 5 * time.Second
	DefaultListPageSize   = 1000
)

// Validate reports options New cannot use.
func (o Options) Validate() error {
	if o.RequestTimeout < 0 {
		return errors.Newf("etcdstore: negative RequestTimeout %s", o.RequestTimeout)
	}
	if o.ListPageSize < 0 {
		return errors.Newf("etcdstore: negative ListPageSize %d", o.ListPageSize)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.ListPageSize == 0 {
		o.ListPageSize = DefaultListPageSize
	}
	return o
}
