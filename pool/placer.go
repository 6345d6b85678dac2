package pool

// Placer is an allocation strategy: it chooses the pchannel of each new
// vchannel. Config.Strategy names the strategy; RoundRobin and LeastLoaded
// are built in, and Options.Placers supplies any other by name.
//
// Allocate calls Place once per new vchannel of a batch, in the order
// asked, while it holds the pool's lock: Place must be quick, must not call
// the Pool, and should be a function of its Placement (an allocator that
// lost a race to another one decides the whole batch again). Nothing it
// answers is persisted until the whole batch commits: an error, or a name
// that is not one of Placement.PChannels, fails the Allocate call and
// allocates nothing.
type Placer interface {
	Place(p Placement) (pchannel string, err error)
}

// PlacerFunc adapts a function to Placer.
type PlacerFunc func(p Placement) (string, error)

// Place calls f.
func (f PlacerFunc) Place(p Placement) (string, error) { return f(p) }

// Placement is what a Placer decides on.
type Placement struct {
	// VChannel is the vchannel to place.
	VChannel string
	// PChannels are the pool's pchannels, in index order. The slice is the
	// pool's and valid only during the call: do not keep or change it.
	PChannels []PChannelLoad
	// Turn counts the vchannels placed in this pool before this one, every
	// strategy's: it is persisted with the allocation table, so it goes on
	// across restarts and processes (round-robin places on
	// PChannels[Turn % len(PChannels)]).
	Turn uint64
}

// PChannelLoad is a pchannel and the vchannels it holds.
type PChannelLoad struct {
	Name string
	// VChannels is how many vchannels it held when the batch began.
	VChannels int
	// Added is how many vchannels of this batch were placed on it so far.
	Added int
}

// roundRobin is the RoundRobin strategy: pchannels in turn.
type roundRobin struct{}

func (roundRobin) Place(p Placement) (string, error) {
	return p.PChannels[p.Turn%uint64(len(p.PChannels))].Name, nil
}

// leastLoaded is the LeastLoaded strategy: the pchannel with the fewest
// vchannels, or the least load when load reports one; ties go to the lowest
// index.
type leastLoaded struct {
	load func(pchannel string) float64 // nil: count vchannels
}

func (l leastLoaded) Place(p Placement) (string, error) {
	pcs := p.PChannels
	score := func(pc PChannelLoad) float64 { return float64(pc.VChannels + pc.Added) }
	if l.load != nil {
		// A vchannel added in this batch weighs the average load of one
		// vchannel.
		total, n := 0.0, 0
		for _, pc := range pcs {
			total += l.load(pc.Name)
			n += pc.VChannels
		}
		per := 1.0
		if n > 0 && total > 0 {
			per = total / float64(n)
		}
		score = func(pc PChannelLoad) float64 { return l.load(pc.Name) + per*float64(pc.Added) }
	}
	best := pcs[0]
	for _, pc := range pcs[1:] {
		if score(pc) < score(best) {
			best = pc
		}
	}
	return best.Name, nil
}
