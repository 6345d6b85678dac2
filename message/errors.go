package message

import "github.com/cockroachdb/errors"

var (
	// ErrReservedProperty is returned when a user property key starts with the
	// reserved prefix '_'.
	ErrReservedProperty = errors.New("property key is reserved")
	// ErrIncomparableID is returned when two IDs of different backends, or an
	// ID and the zero ID, are compared.
	ErrIncomparableID = errors.New("message ids are not comparable")
	// ErrCorruptID is returned when a marshalled ID cannot be decoded.
	ErrCorruptID = errors.New("corrupt message id")
	// ErrBadProperty is returned when a reserved property holds a value that
	// cannot be decoded (a log written by something that is not streamwal).
	ErrBadProperty = errors.New("malformed reserved property")
)
