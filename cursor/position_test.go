package cursor_test

import (
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/cursor"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/message"
)

func TestPositionStrings(t *testing.T) {
	for s, want := range map[string]cursor.Position{
		"":                        {},
		"0":                       {ID: "0"},
		"4411":                    {ID: "4411"},               // a kafka, local or memory offset written before chains
		"12:3:-1@2":               {ID: "12:3:-1@2"},          // a pulsar id
		"s1/4411":                 {Segment: 1, ID: "4411"},   //
		"s0/s12":                  {ID: "s12"},                // an id beginning with "s" says its segment
		"s7/12:3@2":               {Segment: 7, ID: "12:3@2"}, //
		"s3/s":                    {Segment: 3, ID: "s"},      //
		"s3/a/b":                  {Segment: 3, ID: "a/b"},    // the id is everything after the first '/'
		"-1:-1":                   {ID: "-1:-1"},              //
		"s18446744073709551615/9": {Segment: 1<<64 - 1, ID: "9"},
	} {
		got, err := cursor.ParsePosition(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
		require.Equal(t, s, got.String())
		require.NoError(t, got.Validate())
	}
}

func TestParsePositionRefusesCorruptStrings(t *testing.T) {
	for _, s := range []string{
		"s", "s1", "s/1", "s1/", "sx/1", "s-1/1", "s+1/1", "s01/1", "s0/1", "s 1/1",
		"s18446744073709551616/1", "12 3", "12\n", "\x00", "é", "s1/\x7f",
		strings.Repeat("9", cursor.MaxIDLen+1),
	} {
		_, err := cursor.ParsePosition(s)
		require.Error(t, err, "%q", s)
		errmarktest.Is(t, err, message.ErrCorruptID)
	}
	require.Error(t, cursor.Position{Segment: 2}.Validate(), "a segment without an id has no string")
}

// FuzzParsePosition: whatever a string is, ParsePosition answers without
// panicking; what it accepts has that one string, and the ID matches the
// grammar.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"", "0", "4411", "12:3:-1@2", "s1/4411", "s0/s12", "s01/1", "s0/1", "s1/", "s", "s/", "s99999999999999999999/1", "s3/a/b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := cursor.ParsePosition(s)
		if err != nil {
			if !errors.Is(err, message.ErrCorruptID) {
				t.Fatalf("%q: %v does not match message.ErrCorruptID", s, err)
			}
			return
		}
		if got := p.String(); got != s {
			t.Fatalf("%q parses to %+v, whose string is %q", s, p, got)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%q parses to %+v, which does not validate: %v", s, p, err)
		}
		if p.IsZero() != (s == "") {
			t.Fatalf("%q parses to %+v: zero %v", s, p, p.IsZero())
		}
		for i := 0; i < len(p.ID); i++ {
			if p.ID[i] <= ' ' || p.ID[i] > '~' {
				t.Fatalf("%q: id %q holds byte %#x", s, p.ID, p.ID[i])
			}
		}
	})
}
