package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamwal/streamwal/meta"
	"github.com/streamwal/streamwal/meta/internal/storeerr"
)

// Store is a meta.Store on an etcd cluster, under a key prefix. Safe for
// concurrent use.
type Store struct {
	cli  *clientv3.Client
	opts Options

	// stop ends with Close: it cancels the calls in flight.
	stop   context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // guards closed, and calls.Add against Close's Wait
	closed bool
	calls  sync.WaitGroup // calls in flight
}

var _ meta.Store = (*Store)(nil)

// New returns a store on cli under opts.Prefix. The caller owns cli: it
// must outlive the store, and Close does not close it. New does not talk
// to the cluster.
func New(cli *clientv3.Client, opts Options) (*Store, error) {
	if cli == nil {
		return nil, errors.Wrap(meta.ErrInvalid, "etcdstore: nil client")
	}
	if err := opts.Validate(); err != nil {
		return nil, storeerr.Mark(err, meta.ErrInvalid)
	}
	s := &Store{cli: cli, opts: opts.withDefaults()}
	s.stop, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// begin starts a call named op: ErrClosed after Close, the context's error
// if ctx is done. Otherwise it returns the context of the call (ctx, the
// request timeout and Close) and the function that ends the call.
func (s *Store) begin(ctx context.Context, op string) (context.Context, func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, errors.Wrapf(meta.ErrClosed, "etcdstore: %s", op)
	}
	s.calls.Add(1)
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		s.calls.Done()
		return nil, nil, errors.Wrapf(err, "etcdstore: %s", op)
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	stopCancel := context.AfterFunc(s.stop, cancel)
	return cctx, func() {
		stopCancel()
		cancel()
		s.calls.Done()
	}, nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// fail maps err, the error of the call op with the caller's context ctx.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	err = errors.Wrapf(err, "etcdstore: %s", op)
	if s.isClosed() {
		return storeerr.Mark(err, meta.ErrClosed)
	}
	return classify(ctx, err)
}

// cmp is the compare of a key expected at revision expect (not Any).
func cmp(key string, expect int64) clientv3.Cmp {
	if expect == meta.Absent {
		return clientv3.Compare(clientv3.Version(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", expect)
}

// txnRevOf is the revision the keys-only Range i of a failed Txn found
// (meta.Absent: the key does not exist).
func txnRevOf(resp *clientv3.TxnResponse, i int) int64 {
	if i >= len(resp.Responses) {
		return meta.Absent
	}
	if g := resp.Responses[i].GetResponseRange(); g != nil && len(g.Kvs) > 0 {
		return g.Kvs[0].ModRevision
	}
	return meta.Absent
}

// Get returns key's value and revision, or meta.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (meta.KV, error) {
	op := fmt.Sprintf("get %q", key)
	cctx, done, err := s.begin(ctx, op)
	if err != nil {
		return meta.KV{}, err
	}
	defer done()
	if err := meta.ValidateKey(key); err != nil {
		return meta.KV{}, errors.Wrap(err, "etcdstore: get")
	}
	resp, err := s.cli.Get(cctx, s.opts.Prefix+key)
	if err != nil {
		return meta.KV{}, s.fail(ctx, op, err)
	}
	if len(resp.Kvs) == 0 {
		return meta.KV{}, errors.Wrapf(meta.ErrNotFound, "etcdstore: %s", op)
	}
	kv := resp.Kvs[0]
	return meta.KV{Key: key, Value: kv.Value, Revision: kv.ModRevision}, nil
}

// List returns every key with prefix, in byte order, read at one revision,
// and that revision.
func (s *Store) List(ctx context.Context, prefix string) ([]meta.KV, int64, error) {
	op := fmt.Sprintf("list %q", prefix)
	cctx, done, err := s.begin(ctx, op)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	start := s.opts.Prefix + prefix
	end := clientv3.GetPrefixRangeEnd(start)
	if start == "" {
		start, end = "\x00", "\x00" // the whole keyspace
	}
	kvs, rev, err := s.listAt(cctx, start, end, s.opts.ListPageSize)
	if errors.Is(err, rpctypes.ErrCompacted) {
		// The first page's revision was compacted away before the last
		// page was read: start over in one request, at one revision by itself.
		kvs, rev, err = s.listAt(cctx, start, end, 0)
	}
	if err != nil {
		return nil, 0, s.fail(ctx, op, err)
	}
	return kvs, rev, nil
}

// listAt reads [start, end) in pages of pageSize keys (0: all in one),
// every page at the revision of the first.
func (s *Store) listAt(ctx context.Context, start, end string, pageSize int) ([]meta.KV, int64, error) {
	var (
		out []meta.KV
		rev int64
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(pageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, start, opts...)
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			key, ok := strings.CutPrefix(string(kv.Key), s.opts.Prefix)
			if !ok {
				return nil, 0, errors.AssertionFailedf("etcdstore: key %q outside prefix %q", kv.Key, s.opts.Prefix)
			}
			out = append(out, meta.KV{Key: key, Value: kv.Value, Revision: kv.ModRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Put writes key if its revision is expect and returns the new revision.
func (s *Store) Put(ctx context.Context, key string, value []byte, expect int64) (int64, error) {
	op := fmt.Sprintf("put %q", key)
	cctx, done, err := s.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := errors.CombineErrors(meta.ValidateKey(key), meta.ValidateExpect(expect)); err != nil {
		return 0, errors.Wrap(err, "etcdstore: put")
	}
	full := s.opts.Prefix + key
	var cmps []clientv3.Cmp
	if expect != meta.Any {
		cmps = append(cmps, cmp(full, expect))
	}
	resp, err := s.cli.Txn(cctx).If(cmps...).
		Then(clientv3.OpPut(full, string(value))).
		Else(clientv3.OpGet(full, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, s.fail(ctx, op, err)
	}
	if !resp.Succeeded {
		return 0, storeerr.Conflict("etcdstore", "put", key, expect, txnRevOf(resp, 0))
	}
	return resp.Header.Revision, nil
}

// Delete removes key if its revision is expect.
func (s *Store) Delete(ctx context.Context, key string, expect int64) error {
	op := fmt.Sprintf("delete %q", key)
	cctx, done, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer done()
	if err := errors.CombineErrors(meta.ValidateKey(key), meta.ValidateExpect(expect)); err != nil {
		return errors.Wrap(err, "etcdstore: delete")
	}
	full := s.opts.Prefix + key
	var cmps []clientv3.Cmp
	if expect != meta.Any {
		cmps = append(cmps, cmp(full, expect))
	}
	resp, err := s.cli.Txn(cctx).If(cmps...).
		Then(clientv3.OpDelete(full)).
		Else(clientv3.OpGet(full, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if !resp.Succeeded {
		return storeerr.Conflict("etcdstore", "delete", key, expect, txnRevOf(resp, 0))
	}
	return nil
}

// Commit applies txn in one etcd transaction.
func (s *Store) Commit(ctx context.Context, txn meta.Txn) (int64, error) {
	const op = "commit"
	cctx, done, err := s.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := txn.Validate(); err != nil {
		return 0, errors.Wrap(err, "etcdstore: commit")
	}
	cmps := make([]clientv3.Cmp, 0, len(txn.Conds))
	reads := make([]clientv3.Op, 0, len(txn.Conds))
	for _, c := range txn.Conds {
		full := s.opts.Prefix + c.Key
		cmps = append(cmps, cmp(full, c.Revision))
		reads = append(reads, clientv3.OpGet(full, clientv3.WithKeysOnly()))
	}
	writes := make([]clientv3.Op, 0, len(txn.Puts)+len(txn.Deletes))
	for _, p := range txn.Puts {
		writes = append(writes, clientv3.OpPut(s.opts.Prefix+p.Key, string(p.Value)))
	}
	for _, d := range txn.Deletes {
		writes = append(writes, clientv3.OpDelete(s.opts.Prefix+d))
	}
	resp, err := s.cli.Txn(cctx).If(cmps...).Then(writes...).Else(reads...).Commit()
	if err != nil {
		return 0, s.fail(ctx, op, err)
	}
	if !resp.Succeeded {
		for i, c := range txn.Conds {
			if actual := txnRevOf(resp, i); actual != c.Revision {
				return 0, storeerr.Conflict("etcdstore", "commit: condition on", c.Key, c.Revision, actual)
			}
		}
		return 0, errors.Wrap(meta.ErrConflict, "etcdstore: commit: a condition failed")
	}
	return resp.Header.Revision, nil
}

// Close ends the calls in flight (they fail with meta.ErrClosed), waits for
// them, and makes every later call fail with meta.ErrClosed. It does not
// close the client. Idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.calls.Wait()
	return nil
}
