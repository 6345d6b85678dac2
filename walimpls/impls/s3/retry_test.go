package s3

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/message"
	"github.com/streamwal/streamwal/walimpls"
)

// faulty answers the first `times` PUTs of keys ending in suffix with
// fail (nil: hangs until the client gives up), then lets them through.
func faulty(suffix string, times int64, fail func(http.ResponseWriter), seen *atomic.Int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, suffix) {
				if n := seen.Add(1); n <= times {
					if fail == nil {
						<-r.Context().Done()
						return
					}
					fail(w)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func slowDown(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
}

func internalError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>oops</Message></Error>`))
}

// Transient failures are the client's to retry, within MaxAttempts: a
// 503 SlowDown and a try that times out.
func TestTransientFailuresAreRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(http.ResponseWriter)
	}{{"SlowDown", slowDown}, {"Timeout", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			var seen atomic.Int64
			st := newTestStore(t, withHandler(faulty(slotPath("retry", 0, 0), 2, tc.fail, &seen)))
			cfg := st.config(nil)
			cfg.RequestTimeout = 300 * time.Millisecond
			o := newOpener(t, cfg)
			w := openWAL(t, o, "retry", 1, walimpls.ReadWrite)
			id := appendOK(t, w, "once")
			require.Equal(t, "0.0.0", id.Marshal())
			require.EqualValues(t, 3, seen.Load(), "two failed tries and one that landed")
			require.Equal(t, []string{"once"}, readPayloads(t, w, "once"))
		})
	}
}

// A failure past MaxAttempts fails the append with an unknown outcome and
// leaves the WAL failed for good: it never retries on its own.
func TestFailureBeyondAttemptsIsSticky(t *testing.T) {
	var seen atomic.Int64
	st := newTestStore(t, withHandler(faulty(slotPath("sticky", 0, 0), 1000, internalError, &seen)))
	cfg := st.config(nil)
	cfg.MaxAttempts = 2
	o := newOpener(t, cfg)
	w := openWAL(t, o, "sticky", 1, walimpls.ReadWrite)
	_, err := walimpls.Append(context.Background(), w, message.Message{})
	require.Error(t, err)
	require.False(t, walimpls.NotStored(err), "a failed PUT may have landed: %v", err)
	require.EqualValues(t, 2, seen.Load())
	_, err = walimpls.Append(context.Background(), w, message.Message{})
	require.Error(t, err)
	require.True(t, walimpls.NotStored(err), "refused by a failed WAL: %v", err)
	require.EqualValues(t, 2, seen.Load(), "no request after the failure")
}
