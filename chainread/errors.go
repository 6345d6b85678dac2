package chainread

import "github.com/cockroachdb/errors"

// Sentinel errors, checked with errors.Is. A start in a dropped segment,
// or a sealed segment whose data is gone, is walimpls.ErrPositionGone; a
// start after the chain's last segment is chain.ErrUnknownSegment; a
// chain that does not validate is chain.ErrInvalid. A segment dropped
// while a scanner read it is walimpls.ErrPositionGone.
var (
	// ErrTimeTickOrder ends a scanner that would deliver a timetick at or
	// below one it delivered, or above its sealed segment's
	// Seal.TimeTick: the chain breaks the rule that timeticks grow across
	// seals, and the scanner stops rather than deliver out of order.
	ErrTimeTickOrder = errors.New("chainread: timeticks out of order across the chain")
	// ErrNoOpener means the Openers have no opener for a segment's backend.
	ErrNoOpener = errors.New("chainread: no opener for the segment's backend")
	// ErrChainChanged ends a scanner whose Config.Follow returned a chain
	// that does not continue the one it reads: another channel's, or one
	// whose segment the scanner reads is on another backend, or missing
	// although not dropped from the front (a chain deleted and created
	// again). A consumer starts again from its checkpoint, on a Reader of
	// the chain as it is now.
	ErrChainChanged = errors.New("chainread: the chain no longer continues the one the scanner reads")
)
