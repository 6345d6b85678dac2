package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/streamwal/streamwal/walimpls"
)

// checkBucket is HeadBucket: a wrong bucket, credentials or permissions
// fail with one line naming the endpoint, the bucket and what the store
// said, matching walimpls.ErrInvalidConfig.
func (o *Opener) checkBucket(ctx context.Context) error {
	err := o.st.headBucket(ctx)
	if err == nil {
		return nil
	}
	line := fmt.Sprintf("s3: %s: HeadBucket: %s", o.st.where, oneLine(said(err)))
	if status := statusOf(err); status >= 400 && status < 500 {
		hint := ""
		switch status {
		case http.StatusNotFound:
			hint = " (no such bucket)"
		case http.StatusForbidden:
			hint = " (credentials or permissions refused)"
		case http.StatusBadRequest, http.StatusMovedPermanently:
			hint = " (wrong region or addressing style?)"
		}
		return errors.WithStack(&lineError{line: line + hint, marks: []error{walimpls.ErrInvalidConfig}, cause: err})
	}
	if ctx.Err() != nil {
		return errors.WithStack(&lineError{line: line, marks: []error{ctx.Err()}, cause: err})
	}
	return errors.WithStack(&lineError{line: line, cause: err})
}

// lineError is an error whose text is one line of ours, matching marks and
// unwrapping to the client's error (whose own text spans a request ID, a
// host ID and the operation).
type lineError struct {
	line  string
	marks []error
	cause error
}

func (e *lineError) Error() string { return e.line }
func (e *lineError) Unwrap() []error {
	errs := append([]error(nil), e.marks...)
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// probe proves that the store honours conditional writes atomically (see
// the package doc, "Proving the store fences"); it leaves no object behind
// when it can help it.
func (o *Opener) probe(ctx context.Context) (err error) {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	key := o.keys.probe(hex.EncodeToString(rnd[:]))
	refuse := func(format string, args ...any) error {
		return errors.WithStack(&lineError{line: fmt.Sprintf("s3: %s: refused: %s (set unfenced for a single writer without the proof)",
			o.st.where, fmt.Sprintf(format, args...)), marks: []error{ErrNoConditionalWrites}})
	}
	defer func() {
		// Best effort: a probe key left behind costs nothing but a key.
		if rerr := o.st.removeOne(context.WithoutCancel(ctx), key); rerr != nil && err == nil {
			o.log.Warn("could not delete the probe's key", "key", key, "err", rerr)
		}
		if err != nil {
			o.m.probe.Set(0)
		} else {
			o.m.probe.Set(1)
		}
	}()
	n := o.cfg.ProbeRacers
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		etags  = make([]string, n)
		errs   = make([]error, n)
		bodies = make([][]byte, n)
	)
	for i := range n {
		bodies[i] = []byte(fmt.Sprintf("streamwal probe racer %d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			etags[i], errs[i] = o.st.put(ctx, reqProbe, key, bodies[i], nil, putCond{createOnly: true})
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, errPrecondition) {
			if ctx.Err() != nil {
				return errors.Wrapf(ctx.Err(), "s3: %s: probe", o.st.where)
			}
			return errors.WithStack(&lineError{line: fmt.Sprintf("s3: %s: probe: create-only PUT of %s: %s", o.st.where, key, oneLine(said(err))), cause: err})
		}
	}
	// The key holds the winner's body. A racer's PUT whose first try
	// landed and whose answer was lost is retried by the client and meets
	// its own object: 412, but its body is there (as a flush tells its own
	// earlier try by its nonce). Every other racer must have got 412.
	body, etag, err := o.st.get(ctx, key)
	if err != nil && !errors.Is(err, errNotFound) {
		return errors.Wrapf(err, "s3: %s: probe: read back %s", o.st.where, key)
	}
	won, succeeded, holder := 0, -1, -1
	for i, err := range errs {
		if err == nil {
			won, succeeded = won+1, i
		}
		if string(body) == string(bodies[i]) {
			holder = i
		}
	}
	switch {
	case won > 1 || won == 0 && holder < 0:
		return refuse("%d of %d concurrent create-only PUTs (If-None-Match: *) to one key succeeded, want exactly 1", won, n)
	case won == 1 && holder != succeeded:
		return refuse("the key holds %q after the race, but the PUT that succeeded wrote %q", body, bodies[succeeded])
	case won == 1 && etag == "":
		etag = etags[succeeded]
	}
	if etag == "" {
		return refuse("the store gave no ETag for the key, which If-Match needs")
	}
	_, err = o.st.put(ctx, reqProbe, key, []byte("streamwal probe: wrong etag"), nil, putCond{ifMatch: `"00000000000000000000000000000000"`})
	switch {
	case err == nil:
		return refuse("a PUT with If-Match of a wrong ETag succeeded")
	case !errors.Is(err, errPrecondition):
		return errors.WithStack(&lineError{line: fmt.Sprintf("s3: %s: probe: If-Match PUT of %s: %s", o.st.where, key, oneLine(said(err))), cause: err})
	}
	right := []byte("streamwal probe: right etag")
	_, err = o.st.put(ctx, reqProbe, key, right, nil, putCond{ifMatch: etag})
	if errors.Is(err, errPrecondition) {
		// A try that landed and lost its answer changed the ETag its
		// retry names: then the key holds its body.
		b, _, gerr := o.st.get(ctx, key)
		switch {
		case gerr != nil:
			return errors.Wrapf(gerr, "s3: %s: probe: read back %s", o.st.where, key)
		case string(b) == string(right):
			return nil
		}
		return refuse("a PUT with If-Match of the key's own ETag got 412")
	}
	if err != nil {
		return errors.WithStack(&lineError{line: fmt.Sprintf("s3: %s: probe: If-Match PUT of %s: %s", o.st.where, key, oneLine(said(err))), cause: err})
	}
	return nil
}
