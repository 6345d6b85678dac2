package cursor

import "github.com/streamwal/streamwal/message"

// idBackend is the Backend of a chain ID.
const idBackend = "chain"

// ChainIDValue is the message.IDValue of a chain ID: a segment and an ID
// of the segment's backend. IDs hold a pointer to one (ChainID makes
// them), so that a scanner can allocate those of a batch at once (one
// slice per batch, not one value per message) and point each ID into it.
type ChainIDValue struct {
	Segment   uint64
	BackendID message.ID
}

// Backend implements message.IDValue.
func (v *ChainIDValue) Backend() string { return idBackend }

// Compare implements message.IDValue: by segment, then by the backend's
// order (IDs of one segment share a backend).
func (v *ChainIDValue) Compare(o message.IDValue) int {
	ov, ok := o.(*ChainIDValue)
	if !ok {
		return 1
	}
	switch {
	case v.Segment < ov.Segment:
		return -1
	case v.Segment > ov.Segment:
		return 1
	}
	n, err := v.BackendID.Compare(ov.BackendID)
	if err != nil {
		// Only the zero ID, which a chain ID never holds.
		return 0
	}
	return n
}

// Marshal implements message.IDValue: the position's string.
func (v *ChainIDValue) Marshal() string {
	return Position{Segment: v.Segment, ID: v.BackendID.Marshal()}.String()
}

// ChainID returns the ID of backendID, an ID of the backend of a chain's
// segment: what the chain's writer returns for its appends and its
// scanners deliver. Chain IDs compare by segment, then by the backend's
// order; their string is the Position's.
func ChainID(segment uint64, backendID message.ID) message.ID {
	return message.NewID(&ChainIDValue{Segment: segment, BackendID: backendID})
}

// SplitID returns the segment and the backend ID of a chain ID, and
// false for any other ID.
func SplitID(id message.ID) (segment uint64, backendID message.ID, ok bool) {
	v, ok := id.Value().(*ChainIDValue)
	if !ok {
		return 0, message.ID{}, false
	}
	return v.Segment, v.BackendID, true
}

// PositionOf returns the position of id: a chain ID's segment and backend
// ID, segment 0 for a bare backend ID (what a channel wrote before it had
// a chain), and the zero Position for the zero ID.
func PositionOf(id message.ID) Position {
	if seg, bid, ok := SplitID(id); ok {
		return Position{Segment: seg, ID: bid.Marshal()}
	}
	if id.IsZero() {
		return Position{}
	}
	return Position{ID: id.Marshal()}
}

// IDOf returns p as a chain ID whose backend ID is still p.ID's string,
// not decoded by the segment's backend: what one holds who parsed a
// position without the chain's backends at hand. A reader of the chain
// decodes it where it starts (chainread); it compares with other such IDs
// by segment, then as strings. The zero Position is the zero ID.
func IDOf(p Position) message.ID {
	if p.IsZero() {
		return message.ID{}
	}
	return ChainID(p.Segment, message.NewID(undecoded(p.ID)))
}

// undecoded is a backend ID kept as its string (IDOf).
type undecoded string

func (u undecoded) Backend() string { return "undecoded" }
func (u undecoded) Marshal() string { return string(u) }
func (u undecoded) Compare(o message.IDValue) int {
	ou, ok := o.(undecoded)
	if !ok {
		return -1
	}
	switch {
	case u < ou:
		return -1
	case u > ou:
		return 1
	}
	return 0
}
