package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/atomic"
)

// bench is what one run reports: the facts of its header, the counters its
// progress lines read while it runs, and the summary (text or JSON) at the
// end, complete or not.
type bench struct {
	p           params
	out, errOut io.Writer

	// Header facts, set before the run starts.
	backend   string // local, memory, kafka, pulsar or cluster
	target    string // directory, address or endpoints
	detail    string // more about the target, e.g. "sync always" or "2 nodes"
	channels  int    // channels actually written (cluster mode: at most p.channels)
	verifyMsg string // what the check at the end means

	appended  atomic.Int64
	delivered atomic.Int64
	start     time.Time
}

// total is the number of records of the whole run.
func (b *bench) total() int64 { return int64(b.channels) * int64(b.p.records) }

// targetString is "local (./streamwal-data, sync always)": the backend and
// where it is.
func (b *bench) targetString() string {
	var in []string
	if b.target != "" {
		in = append(in, b.target)
	}
	if b.detail != "" {
		in = append(in, b.detail)
	}
	if len(in) == 0 {
		return b.backend
	}
	return b.backend + " (" + strings.Join(in, ", ") + ")"
}

// headline is what the run means, in one line:
// "4 channels × 16 appenders, 80,000 records of 1 KiB in all, backend local (./streamwal-data, sync always)".
func (b *bench) headline() string {
	where := "backend " + b.targetString()
	if b.backend == "cluster" {
		where = fmt.Sprintf("cluster %s (%s), through the client", b.target, b.detail)
	}
	return fmt.Sprintf("%s × %s, %s records of %s in all, %s",
		plural(b.channels, "channel"), plural(b.p.appenders, "appender"),
		commas(b.total()), sizeString(b.p.size), where)
}

// header prints the headline and what is checked (text mode only).
func (b *bench) header() {
	if b.p.json {
		return
	}
	fmt.Fprintln(b.out, b.headline())
	if b.verifyMsg != "" {
		fmt.Fprintln(b.out, b.verifyMsg)
	}
}

// progress prints a line every p.progressEvery on errOut while the run
// goes on (one line updated in place when errOut is a terminal) until the
// returned stop is called; stop (which may be called more than once) waits
// for the printer to finish and clears an in-place line.
func (b *bench) progress() (stop func()) {
	every := b.p.progressEvery
	if every == 0 {
		every = time.Second
	}
	if every < 0 || b.errOut == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		var lastN int64
		last := b.start
		for {
			select {
			case <-done:
				if b.p.terminal {
					fmt.Fprint(b.errOut, "\r\x1b[K")
				}
				return
			case now := <-t.C:
				n := b.appended.Load()
				rate := float64(n-lastN) / now.Sub(last).Seconds()
				lastN, last = n, now
				line := b.progressLine(now.Sub(b.start), n, b.delivered.Load(), rate)
				if b.p.terminal {
					fmt.Fprint(b.errOut, "\r\x1b[K"+line)
				} else {
					fmt.Fprintln(b.errOut, line)
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// progressLine is "[3s] appended 34,112 of 80,000 (42%), delivered 33,990, 11,370 records/s".
func (b *bench) progressLine(elapsed time.Duration, appended, delivered int64, rate float64) string {
	pct := 0.0
	if t := b.total(); t > 0 {
		pct = 100 * float64(appended) / float64(t)
	}
	return fmt.Sprintf("[%s] appended %s of %s (%d%%), delivered %s, %s records/s",
		elapsed.Round(time.Second), commas(appended), commas(b.total()), int(pct), commas(delivered), commas(int64(rate)))
}

// outcome is how a run ended.
type outcome struct {
	elapsed     time.Duration
	latencies   []time.Duration // of the appends acknowledged, any order
	verified    bool            // every acknowledged record was checked
	interrupted bool
}

// Summary is the -json output: one object with the header facts, the
// counts, the rates and the append latencies.
type Summary struct {
	Backend             string `json:"backend"`
	Target              string `json:"target,omitempty"`
	Detail              string `json:"detail,omitempty"`
	Channels            int    `json:"channels"`
	AppendersPerChannel int    `json:"appendersPerChannel"`
	RecordsPerChannel   int    `json:"recordsPerChannel"`
	Records             int64  `json:"records"`
	RecordBytes         int    `json:"recordBytes"`
	Term                int64  `json:"term,omitempty"`

	Appended    int64 `json:"appended"`
	Delivered   int64 `json:"delivered"`
	Verified    bool  `json:"verified"`
	Interrupted bool  `json:"interrupted"`

	ElapsedSeconds   float64 `json:"elapsedSeconds"`
	RecordsPerSecond float64 `json:"recordsPerSecond"`
	BytesPerSecond   float64 `json:"bytesPerSecond"`

	// AppendLatencyMs holds p50, p90, p99, p999 and max, in milliseconds.
	AppendLatencyMs Latencies `json:"appendLatencyMs"`
}

// Latencies are percentiles of a latency distribution, in milliseconds.
type Latencies struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// quantiles are the rows of the latency table.
var quantiles = []struct {
	name string
	q    float64
}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99.9", 0.999}, {"max", 1}}

// percentile is the nearest-rank q-quantile of sorted (0 when empty).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (b *bench) summary(o outcome) Summary {
	lat := slices.Clone(o.latencies)
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(percentile(lat, q)) / 1e6 }
	appended := b.appended.Load()
	s := Summary{
		Backend: b.backend, Target: b.target, Detail: b.detail,
		Channels: b.channels, AppendersPerChannel: b.p.appenders, RecordsPerChannel: b.p.records,
		Records: b.total(), RecordBytes: b.p.size, Term: b.p.term,
		Appended: appended, Delivered: b.delivered.Load(), Verified: o.verified, Interrupted: o.interrupted,
		ElapsedSeconds:  o.elapsed.Seconds(),
		AppendLatencyMs: Latencies{P50: ms(0.5), P90: ms(0.9), P99: ms(0.99), P999: ms(0.999), Max: ms(1)},
	}
	if b.backend == "cluster" {
		s.Term = 0
	}
	if secs := o.elapsed.Seconds(); secs > 0 {
		s.RecordsPerSecond = float64(appended) / secs
		s.BytesPerSecond = float64(appended) * float64(b.p.size) / secs
	}
	return s
}

// report prints the summary of the run, complete or not: text, or one JSON
// object with -json.
func (b *bench) report(o outcome) error {
	s := b.summary(o)
	if b.p.json {
		enc := json.NewEncoder(b.out)
		return enc.Encode(s)
	}
	rate := fmt.Sprintf("%s records/s, %.1f MiB/s", commas(int64(s.RecordsPerSecond)), s.BytesPerSecond/(1<<20))
	if o.interrupted {
		pct := 0.0
		if s.Records > 0 {
			pct = 100 * float64(s.Appended) / float64(s.Records)
		}
		fmt.Fprintf(b.out, "interrupted after %s: appended %s of %s records (%d%%), %s\n",
			o.elapsed.Round(time.Millisecond), commas(s.Appended), commas(s.Records), int(pct), rate)
		fmt.Fprintf(b.out, "delivered %s so far, each once and in order; the rest was not checked\n", commas(s.Delivered))
	} else {
		fmt.Fprintf(b.out, "appended %s records in %s: %s\n", commas(s.Appended), o.elapsed.Round(time.Millisecond), rate)
		if o.verified {
			fmt.Fprintf(b.out, "delivered %s: %s\n", commas(s.Delivered), b.verifiedMsg())
		}
	}
	if len(o.latencies) == 0 {
		fmt.Fprintln(b.out, "append latency: no append was acknowledged")
		return nil
	}
	fmt.Fprintln(b.out)
	lat := slices.Clone(o.latencies)
	slices.Sort(lat)
	rows := [2][]string{{"append latency"}, {plural(len(lat), "append")}}
	for _, q := range quantiles {
		rows[0] = append(rows[0], q.name)
		rows[1] = append(rows[1], durString(percentile(lat, q.q)))
	}
	// The first column aligned left, the figures right.
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			w := max(len([]rune(rows[0][i])), len([]rune(rows[1][i])))
			pad := strings.Repeat(" ", w-len([]rune(cell)))
			if i == 0 {
				line.WriteString(cell + pad)
			} else {
				line.WriteString("   " + pad + cell)
			}
		}
		fmt.Fprintln(b.out, line.String())
	}
	return nil
}

// verifiedMsg is what a complete, checked run proved.
func (b *bench) verifiedMsg() string {
	if b.backend == "cluster" {
		return "every acknowledged record was read back exactly once, in each appender's order"
	}
	return "every acknowledged record was delivered exactly once, in timetick order"
}

// commas formats n with thousands separators: 80000 is "80,000".
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// sizeString is "1 KiB" for 1024, "100 B" for 100.
func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// plural is "1 channel", "4 channels".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return commas(int64(n)) + " " + what + "s"
}

// durString prints a latency with three significant digits or so: 412µs,
// 1.13ms, 2.051s.
func durString(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3fs", d.Seconds())
}
