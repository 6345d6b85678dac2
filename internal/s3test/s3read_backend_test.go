package s3test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
	"github.com/streamwal/streamwal/walimpls/impls/s3"
)

// TestS3ReadBackend: a channel the backend wrote, at two terms (so with a
// fence between its epochs), listed and fetched by the aws CLI and decoded
// by s3read.py, holds every appended payload byte for byte, in append
// order, with its properties.
func TestS3ReadBackend(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			ctx := testCtx(t)
			const prefix, channel = "interop/", "orders"
			cfg := s.Config(prefix)
			cfg.FlushInterval = 5 * time.Millisecond
			o, err := s3.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = o.Close() }()

			var want []message.Message
			for term := int64(1); term <= 2; term++ {
				w, err := o.Open(ctx, walimpls.Channel{Name: channel, Term: term})
				if err != nil {
					t.Fatal(err)
				}
				for i := range 10 {
					payload := bytes.Repeat([]byte{byte(i), 0, 0xff}, i*100)
					m, err := message.New(payload, map[string]string{"i": strconv.Itoa(i), "term": strconv.FormatInt(term, 10)})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := walimpls.Append(ctx, w, m); err != nil {
						t.Fatalf("term %d append %d: %v", term, i, err)
					}
					want = append(want, m)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			}

			got := fetchAndDecode(t, newAWSCLI(t, s), prefix+channel+"/")
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			sort.Strings(keys) // zero-padded epochs and slots: the log's order
			var records []record
			fences := 0
			for _, k := range keys {
				d := got[k]
				if d.Kind == "fence" {
					fences++
					continue
				}
				for _, r := range d.Records {
					p, err := decodeBase64(r.Payload)
					if err != nil {
						t.Fatal(err)
					}
					records = append(records, record{props: r.Properties, payload: p})
				}
			}
			if fences != 1 {
				t.Errorf("%d fences, want 1 (the open at term 2 sealed epoch of term 1)", fences)
			}
			if len(records) != len(want) {
				t.Fatalf("%d records decoded, %d appended", len(records), len(want))
			}
			for i, r := range records {
				if !bytes.Equal(r.payload, want[i].Payload()) {
					t.Errorf("record %d: payload of %d bytes differs from the %d appended", i, len(r.payload), len(want[i].Payload()))
				}
				props := map[string]string{}
				for _, p := range r.props {
					props[p[0]] = p[1]
				}
				// The backend may add reserved ("_") properties; every
				// appended one must be there as it was.
				for k, v := range want[i].Properties().All() {
					if props[k] != v {
						t.Errorf("record %d: property %q is %q, appended %q (all: %v)", i, k, props[k], v, fmt.Sprint(maps.Collect(maps.All(props))))
					}
				}
			}
		})
	}
}

// TestProbeRefusesUnfencedStores: the backend's probe refuses a store that
// ignores conditional writes and one that applies them non-atomically
// (exactly the stores FakeIgnoringConditions and FakeNonAtomic start), and
// accepts both stores of Stores.
func TestProbeRefusesUnfencedStores(t *testing.T) {
	for _, s := range []*Store{FakeIgnoringConditions(t), FakeNonAtomic(t, 2)} {
		t.Run(s.Name, func(t *testing.T) {
			_, err := s3.New(testCtx(t), s.Config("probe/"))
			if !errors.Is(err, s3.ErrNoConditionalWrites) {
				t.Fatalf("New on a store that does not fence: %s, want ErrNoConditionalWrites", err)
			}
			// It says why, also when formatted (%v runs the error's Format).
			if said := fmt.Sprint(err); strings.Contains(said, "PANIC") || !strings.Contains(said, "refused") {
				t.Errorf("the refusal reads %q (its Error(): %q)", said, err.Error())
			}
		})
	}
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			o, err := s3.New(testCtx(t), s.Config("probe/"))
			if err != nil {
				t.Fatal(err)
			}
			_ = o.Close()
		})
	}
}
