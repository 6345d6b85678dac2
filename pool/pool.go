package pool

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/jonboulle/clockwork"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/walimpls"
)

// MaxBatch bounds the vchannels of one Allocate or Release call: each call
// is one record of the allocation log, a single store value (at most about
// 300 KiB with the longest names).
const MaxBatch = 2048

// maxConflicts bounds how often one call re-reads and decides again after
// another allocator committed first.
const maxConflicts = 64

// Backend is the backend the pool's pchannels live on.
type Backend struct {
	// Name is the backend's name in configuration ("kafka", "local", ...),
	// recorded with the pool and in every WAL-options string.
	Name string
	// Opener, when it implements walimpls.Creator, creates the pchannels
	// that do not exist yet. It may be nil for backends that need nothing
	// created (local, memory).
	Opener walimpls.Opener
	// Chained says the pchannels are chains of segments (package
	// chainwal), each recording the backends it lives on: Name is only
	// where new pchannels begin, and a pool recorded on another backend is
	// not a mismatch (its record is kept as it is), so that a node whose
	// default backend changed still opens the pool.
	Chained bool
}

// Options tunes a Pool; the zero value is ready to use.
type Options struct {
	// Logger receives the pool's logs; nil discards them.
	Logger *slog.Logger
	// Load reports a pchannel's current load (for example its bytes per
	// second) for the LeastLoaded strategy; nil counts vchannels instead.
	Load func(pchannel string) float64
	// Placers supplies strategies by name, for Config.Strategy to choose
	// from beside the built-in RoundRobin and LeastLoaded (which cannot be
	// replaced: a Placer under their names is ErrInvalidConfig).
	Placers map[Strategy]Placer
	// Clock drives the pruner's rounds; nil is the real clock. Tests pass
	// a clockwork.FakeClock and advance it instead of sleeping.
	Clock clockwork.Clock
}

// placer returns the Placer cfg.Strategy names, ErrInvalidConfig when there
// is none.
func (o Options) placer(cfg Config) (Placer, error) {
	for name := range o.Placers {
		if name == RoundRobin || name == LeastLoaded {
			return nil, errors.Wrapf(ErrInvalidConfig, "pool %q: Options.Placers names the built-in strategy %q", cfg.Name, name)
		}
	}
	switch cfg.Strategy {
	case RoundRobin:
		return roundRobin{}, nil
	case LeastLoaded:
		return leastLoaded{load: o.Load}, nil
	}
	if pl := o.Placers[cfg.Strategy]; pl != nil {
		return pl, nil
	}
	known := []string{string(RoundRobin), string(LeastLoaded)}
	for _, name := range slices.Sorted(maps.Keys(o.Placers)) {
		known = append(known, string(name))
	}
	return nil, errors.Wrapf(ErrInvalidConfig, "pool %q: strategy %q (%s; a strategy of your own needs a Placer in Options.Placers)",
		cfg.Name, cfg.Strategy, strings.Join(known, ", "))
}

// Allocation is where a vchannel lives.
type Allocation struct {
	VChannel string
	PChannel string
	// Options is the encoded, versioned WALOptions a node opens it from.
	Options string
}

// Pool is a persisted pool of pchannels and the allocation of vchannels to
// them. Safe for concurrent use; several Pools, in one process or in
// several, may share one pool in the store.
type Pool struct {
	store   meta.Store
	backend Backend
	cfg     Config
	opts    Options
	placer  Placer
	keys    keys
	log     *slog.Logger

	// mu serializes the pool's decisions and guards the cache of the
	// store below.
	mu        sync.Mutex
	closed    bool
	pchannels []string // in index order
	headRev   int64    // revision of the allocation head the table reflects; -1: unknown
	head      headValue
	table     map[string]member          // vchannel → its allocation
	members   map[string]map[string]bool // pchannel → its vchannels
}

// member is one vchannel's allocation: its pchannel, and the sequence of
// the record that allocated it (a checkpoint of an earlier allocation of
// the same name is not its).
type member struct {
	pchannel string
	seq      uint64
}

// Open opens the pool cfg describes in store, creating it when it does not
// exist: it records the configuration, creates and records the pchannels
// that are missing, and reads the allocation table.
func Open(ctx context.Context, store meta.Store, backend Backend, cfg Config, opts Options) (*Pool, error) {
	if store == nil {
		return nil, errors.Wrap(ErrInvalidConfig, "pool: nil store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if backend.Name == "" {
		return nil, errors.Wrap(ErrInvalidConfig, "pool: backend name is empty")
	}
	cfg = cfg.withDefaults()
	placer, err := opts.placer(cfg)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	p := &Pool{
		store:   store,
		backend: backend,
		cfg:     cfg,
		opts:    opts,
		placer:  placer,
		keys:    newKeys(cfg.Name),
		log:     opts.Logger.With("pool", cfg.Name),
		headRev: -1,
	}
	size, err := p.ensureConfig(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.ensurePChannels(ctx, size); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refreshLocked(ctx); err != nil {
		return nil, err
	}
	p.log.Info("pool open", "backend", backend.Name, "pchannels", len(p.pchannels), "vchannels", len(p.table))
	return p, nil
}

// ensureConfig records the configuration, or checks it against the stored
// one and grows the stored size, and returns the pool's size.
func (p *Pool) ensureConfig(ctx context.Context) (int, error) {
	key := p.keys.config()
	want := configValue{V: formatVersion, Backend: p.backend.Name, Prefix: p.cfg.Prefix, Size: p.cfg.Size, Strategy: p.cfg.Strategy}
	for range maxConflicts {
		kv, err := p.store.Get(ctx, key)
		if errors.Is(err, meta.ErrNotFound) {
			_, err = p.store.Put(ctx, key, encode(want), meta.Absent)
			if errors.Is(err, meta.ErrConflict) {
				continue // another process created the pool first
			}
			if err != nil {
				return 0, errors.Wrapf(err, "pool %q: record config", p.cfg.Name)
			}
			p.log.Info("pool created", "backend", want.Backend, "prefix", want.Prefix, "size", want.Size)
			return want.Size, nil
		}
		if err != nil {
			return 0, errors.Wrapf(err, "pool %q: read config", p.cfg.Name)
		}
		var got configValue
		if err := decode(key, kv.Value, &got, func() int { return got.V }); err != nil {
			return 0, err
		}
		if p.backend.Chained {
			want.Backend = got.Backend
		}
		switch {
		case got.Backend != want.Backend:
			return 0, errors.Wrapf(ErrConfigMismatch, "pool %q is on backend %q, not %q", p.cfg.Name, got.Backend, want.Backend)
		case got.Prefix != want.Prefix:
			return 0, errors.Wrapf(ErrConfigMismatch, "pool %q has pchannel prefix %q, not %q", p.cfg.Name, got.Prefix, want.Prefix)
		case want.Size < got.Size:
			return 0, errors.Wrapf(ErrShrink, "pool %q has %d pchannels; configured %d", p.cfg.Name, got.Size, want.Size)
		case want.Size == got.Size && want.Strategy == got.Strategy:
			return got.Size, nil
		}
		if _, err := p.store.Put(ctx, key, encode(want), kv.Revision); errors.Is(err, meta.ErrConflict) {
			continue
		} else if err != nil {
			return 0, errors.Wrapf(err, "pool %q: update config", p.cfg.Name)
		}
		if want.Size > got.Size {
			p.log.Info("pool grows", "from", got.Size, "to", want.Size)
		}
		return want.Size, nil
	}
	return 0, errors.Wrapf(meta.ErrConflict, "pool %q: config changed %d times while opening", p.cfg.Name, maxConflicts)
}

// ensurePChannels creates on the backend and records every pchannel below
// size that is not recorded yet: creation first, so a recorded pchannel
// always exists, and a crash in between only repeats an idempotent create.
func (p *Pool) ensurePChannels(ctx context.Context, size int) error {
	recorded, _, err := p.store.List(ctx, p.keys.pchannels())
	if err != nil {
		return errors.Wrapf(err, "pool %q: list pchannels", p.cfg.Name)
	}
	known := map[string]bool{}
	for _, kv := range recorded {
		known[strings.TrimPrefix(kv.Key, p.keys.pchannels())] = true
	}
	creator, _ := p.backend.Opener.(walimpls.Creator)
	for i := range size {
		name := pchannelName(p.cfg.Prefix, i)
		if known[name] {
			continue
		}
		if creator != nil {
			if err := creator.Create(ctx, name); err != nil {
				return errors.Wrapf(err, "pool %q: create pchannel %q on %s", p.cfg.Name, name, p.backend.Name)
			}
		}
		_, err := p.store.Put(ctx, p.keys.pchannel(name), encode(pchannelValue{V: formatVersion, Index: i}), meta.Absent)
		if err != nil && !errors.Is(err, meta.ErrConflict) { // a conflict: another process recorded it
			return errors.Wrapf(err, "pool %q: record pchannel %q", p.cfg.Name, name)
		}
		p.log.Info("pchannel ready", "pchannel", name, "created", creator != nil)
	}
	return nil
}

// refreshLocked brings the cache up to date with the store: the recorded
// pchannels, and the allocation table when the head moved. Assumes p.mu is
// held.
func (p *Pool) refreshLocked(ctx context.Context) error {
	if p.closed {
		return errors.Wrapf(ErrClosed, "pool %q", p.cfg.Name)
	}
	// The head and the records in one read, at one revision.
	kvs, _, err := p.store.List(ctx, p.keys.root+"alloc/")
	if err != nil {
		return errors.Wrapf(err, "pool %q: read the allocation table", p.cfg.Name)
	}
	var (
		headRev int64
		head    headValue
		records []meta.KV
	)
	for _, kv := range kvs {
		switch {
		case kv.Key == p.keys.head():
			if err := decode(kv.Key, kv.Value, &head, func() int { return head.V }); err != nil {
				return err
			}
			headRev = kv.Revision
		case strings.HasPrefix(kv.Key, p.keys.logPrefix()):
			records = append(records, kv)
		}
	}
	if err := p.refreshPChannelsLocked(ctx); err != nil {
		return err
	}
	if headRev == p.headRev {
		return nil
	}
	table := map[string]member{}
	for _, kv := range records {
		seq, err := strconv.ParseUint(strings.TrimPrefix(kv.Key, p.keys.logPrefix()), 10, 64)
		if err != nil {
			return errors.Wrapf(meta.ErrCorrupt, "pool: %s: not a record key", kv.Key)
		}
		if seq >= head.Next {
			continue // not committed with the head this read saw (cannot happen: one revision)
		}
		var rec recordValue
		if err := decode(kv.Key, kv.Value, &rec, func() int { return rec.V }); err != nil {
			return err
		}
		for _, a := range rec.Alloc {
			table[a[0]] = member{pchannel: a[1], seq: seq}
		}
		for _, v := range rec.Release {
			delete(table, v)
		}
	}
	p.table, p.head, p.headRev = table, head, headRev
	p.members = map[string]map[string]bool{}
	for v, m := range table {
		if p.members[m.pchannel] == nil {
			p.members[m.pchannel] = map[string]bool{}
		}
		p.members[m.pchannel][v] = true
	}
	return nil
}

// refreshPChannelsLocked reads the recorded pchannels: another process may
// have grown the pool. Assumes p.mu is held.
func (p *Pool) refreshPChannelsLocked(ctx context.Context) error {
	kvs, _, err := p.store.List(ctx, p.keys.pchannels())
	if err != nil {
		return errors.Wrapf(err, "pool %q: list pchannels", p.cfg.Name)
	}
	type indexed struct {
		name  string
		index int
	}
	all := make([]indexed, 0, len(kvs))
	for _, kv := range kvs {
		var v pchannelValue
		if err := decode(kv.Key, kv.Value, &v, func() int { return v.V }); err != nil {
			return err
		}
		all = append(all, indexed{name: strings.TrimPrefix(kv.Key, p.keys.pchannels()), index: v.Index})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].index < all[j].index })
	names := make([]string, len(all))
	for i, x := range all {
		if x.index != i {
			// Pchannels are recorded in index order by every opener; a gap
			// is a pool another opener is still growing: use the prefix.
			names = names[:i]
			break
		}
		names[i] = x.name
	}
	if len(names) == 0 {
		return errors.Wrapf(meta.ErrCorrupt, "pool %q: no pchannel recorded", p.cfg.Name)
	}
	p.pchannels = names
	return nil
}

// Allocate gives each vchannel a pchannel, or returns the one it has: in
// the order asked, at most MaxBatch at once, all persisted in one record
// (all or nothing). The strategy places the new ones; its error, or a
// pchannel it names that is not the pool's (ErrUnknownPChannel), fails the
// call and allocates nothing.
func (p *Pool) Allocate(ctx context.Context, vchannels ...string) ([]Allocation, error) {
	if err := validateBatch(vchannels); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for range maxConflicts {
		if err := p.refreshLocked(ctx); err != nil {
			return nil, err
		}
		pick := p.picker()
		rec := recordValue{V: formatVersion}
		fresh := map[string]string{}
		for _, v := range vchannels {
			if _, ok := p.table[v]; ok {
				continue
			}
			if _, ok := fresh[v]; ok {
				continue
			}
			pc, err := pick.next(v)
			if err != nil {
				return nil, err
			}
			fresh[v] = pc
			rec.Alloc = append(rec.Alloc, [2]string{v, pc})
		}
		if len(rec.Alloc) > 0 {
			err := p.commitLocked(ctx, rec, pick.turn)
			if errors.Is(err, meta.ErrConflict) {
				continue // another allocator committed first: decide again
			}
			if err != nil {
				return nil, errors.Wrapf(err, "pool %q: allocate %d vchannels", p.cfg.Name, len(rec.Alloc))
			}
		}
		out := make([]Allocation, len(vchannels))
		for i, v := range vchannels {
			out[i] = p.allocationLocked(v, p.table[v].pchannel)
		}
		return out, nil
	}
	return nil, errors.Wrapf(meta.ErrConflict, "pool %q: %d other allocators committed first", p.cfg.Name, maxConflicts)
}

// Release frees vchannels: they no longer hold their pchannel back, and a
// later Allocate of the same name starts afresh. Unknown names are ignored.
func (p *Pool) Release(ctx context.Context, vchannels ...string) error {
	if err := validateBatch(vchannels); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for range maxConflicts {
		if err := p.refreshLocked(ctx); err != nil {
			return err
		}
		rec := recordValue{V: formatVersion}
		seen := map[string]bool{}
		for _, v := range vchannels {
			if _, ok := p.table[v]; ok && !seen[v] {
				seen[v] = true
				rec.Release = append(rec.Release, v)
			}
		}
		if len(rec.Release) == 0 {
			return nil
		}
		err := p.commitLocked(ctx, rec, p.head.RR)
		if errors.Is(err, meta.ErrConflict) {
			continue
		}
		if err != nil {
			return errors.Wrapf(err, "pool %q: release %d vchannels", p.cfg.Name, len(rec.Release))
		}
		// Their checkpoints are of no use any more; a leftover is ignored
		// anyway (it names an older allocation), so this is tidying only.
		for _, v := range rec.Release {
			if err := p.store.Delete(ctx, p.keys.checkpoint(v), meta.Any); err != nil {
				p.log.Warn("checkpoint of a released vchannel not deleted", "vchannel", v, "error", err)
			}
		}
		return nil
	}
	return errors.Wrapf(meta.ErrConflict, "pool %q: %d other allocators committed first", p.cfg.Name, maxConflicts)
}

// commitLocked writes rec as the next record of the log, conditional on the
// head the cache reflects, and applies it to the cache. An error other than
// a conflict leaves the cache to be read again: the commit may have been
// applied. Assumes p.mu is held.
func (p *Pool) commitLocked(ctx context.Context, rec recordValue, turn uint64) error {
	seq := p.head.Next
	head := headValue{V: formatVersion, Next: seq + 1, RR: turn}
	rev, err := p.store.Commit(ctx, meta.Txn{
		Conds: []meta.Cond{{Key: p.keys.head(), Revision: max(p.headRev, 0)}},
		Puts: []meta.KV{
			{Key: p.keys.head(), Value: encode(head)},
			{Key: p.keys.logRecord(seq), Value: encode(rec)},
		},
	})
	if err != nil {
		p.headRev = -1 // read the table again before deciding anything
		return err
	}
	for _, a := range rec.Alloc {
		p.table[a[0]] = member{pchannel: a[1], seq: seq}
		if p.members[a[1]] == nil {
			p.members[a[1]] = map[string]bool{}
		}
		p.members[a[1]][a[0]] = true
	}
	for _, v := range rec.Release {
		if m, ok := p.table[v]; ok {
			delete(p.members[m.pchannel], v)
			delete(p.table, v)
		}
	}
	p.head, p.headRev = head, rev
	return nil
}

// picker asks the pool's Placer for the pchannels of one batch, on the
// cache as it is. Assumes p.mu is held.
type picker struct {
	p     *Pool
	turn  uint64         // the persisted turn, counting this batch's placements
	loads []PChannelLoad // what the Placer is shown; refilled before every call
	added map[string]int
}

func (p *Pool) picker() *picker {
	return &picker{p: p, turn: p.head.RR, loads: make([]PChannelLoad, len(p.pchannels)), added: map[string]int{}}
}

// next places vchannel v. A Placer's error, or a pchannel not in the pool,
// fails the batch.
func (k *picker) next(v string) (string, error) {
	p := k.p
	for i, pc := range p.pchannels {
		k.loads[i] = PChannelLoad{Name: pc, VChannels: len(p.members[pc]), Added: k.added[pc]}
	}
	pc, err := p.placer.Place(Placement{VChannel: v, PChannels: k.loads, Turn: k.turn})
	if err != nil {
		return "", errors.Wrapf(err, "pool %q: strategy %q: place vchannel %q", p.cfg.Name, p.cfg.Strategy, v)
	}
	if !slices.Contains(p.pchannels, pc) {
		return "", errors.Wrapf(ErrUnknownPChannel, "pool %q: strategy %q placed vchannel %q on %q, not a pchannel of the pool (%d pchannels, %s to %s); nothing allocated",
			p.cfg.Name, p.cfg.Strategy, v, pc, len(p.pchannels), p.pchannels[0], p.pchannels[len(p.pchannels)-1])
	}
	k.added[pc]++
	k.turn++
	return pc, nil
}

func (p *Pool) allocationLocked(vchannel, pchannel string) Allocation {
	return Allocation{VChannel: vchannel, PChannel: pchannel, Options: WALOptions{
		Backend: p.backend.Name, Pool: p.cfg.Name, PChannel: pchannel, VChannel: vchannel,
	}.Encode()}
}

// Lookup returns a vchannel's allocation, reading the store when the cache
// does not know it (another process may have allocated it).
func (p *Pool) Lookup(ctx context.Context, vchannel string) (Allocation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Allocation{}, errors.Wrapf(ErrClosed, "pool %q", p.cfg.Name)
	}
	m, ok := p.table[vchannel]
	if !ok {
		if err := p.refreshLocked(ctx); err != nil {
			return Allocation{}, err
		}
		if m, ok = p.table[vchannel]; !ok {
			return Allocation{}, errors.Wrapf(ErrNotAllocated, "pool %q: vchannel %q", p.cfg.Name, vchannel)
		}
	}
	return p.allocationLocked(vchannel, m.pchannel), nil
}

// PChannels returns the pool's pchannels, in index order.
func (p *Pool) PChannels() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pchannels)
}

// VChannels returns the vchannels allocated to a pchannel, sorted, as far as
// this Pool has read the store (Refresh reads it again).
func (p *Pool) VChannels(pchannel string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.members[pchannel]))
}

// Refresh reads what other processes changed in the store.
func (p *Pool) Refresh(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refreshLocked(ctx)
}

// Config returns the pool's configuration, defaults applied.
func (p *Pool) Config() Config { return p.cfg }

// Close makes every later call fail with ErrClosed. It does not close the
// store, which the caller owns.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

func validateBatch(vchannels []string) error {
	if len(vchannels) > MaxBatch {
		return errors.Wrapf(ErrBatchTooLarge, "%d vchannels in one call (at most %d)", len(vchannels), MaxBatch)
	}
	for _, v := range vchannels {
		if err := walimpls.ValidateChannelName(v); err != nil {
			return errors.WithStack(fmt.Errorf("vchannel %q: %w: %w", v, err, ErrInvalidVChannel))
		}
	}
	return nil
}
