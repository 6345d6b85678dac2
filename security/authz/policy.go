package authz

import (
	"crypto/subtle"
	"iter"
	"slices"
	"strings"
)

// Policy is a compiled Config: it authenticates requests into principals
// and answers whether a principal holds an action on a channel. It is
// immutable and safe for concurrent use. A decision makes no allocation:
// per principal and action, literal names are a map and prefixes a sorted
// slice from which every prefix covered by a shorter one was dropped, so
// that one binary search finds the only prefix that can match.
type Policy struct {
	principals map[string]*grants
	tokens     []tokenEntry // in the order of the file; searched whole every time
}

type tokenEntry struct {
	hash      [32]byte
	principal Principal
}

// grants are one principal's matchers, one per action (Action.index).
type grants [len(actions)]matcher

// matcher decides whether a name matches a set of patterns.
type matcher struct {
	all      bool                // "*"
	literal  map[string]struct{} // names
	prefixes []string            // sorted, none a prefix of another
}

// Principal is who a request was authenticated as. Its zero value, and a
// principal the policy does not name, holds nothing.
type Principal struct {
	// Name is the principal's name: a certificate's CN, or the policy
	// entry a token's hash is listed under.
	Name string
	g    *grants
}

// Compile validates c and builds its Policy.
func Compile(c Config) (*Policy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{principals: make(map[string]*grants, len(c.Principals))}
	for _, name := range sortedKeys(c.Principals) {
		b := c.Principals[name]
		var patterns [len(actions)][]string
		for _, role := range b.Roles {
			for _, gr := range c.Roles[role] {
				for _, a := range gr.Actions {
					patterns[a.index()] = append(patterns[a.index()], gr.Channels...)
				}
			}
		}
		g := new(grants)
		for i := range g {
			g[i] = newMatcher(patterns[i])
		}
		p.principals[name] = g
		for _, h := range b.Tokens {
			sum, _ := parseHash(h) // validated
			p.tokens = append(p.tokens, tokenEntry{hash: sum, principal: Principal{Name: name, g: g}})
		}
	}
	return p, nil
}

func newMatcher(patterns []string) matcher {
	var m matcher
	var prefixes []string
	for _, pat := range patterns {
		switch name, isPrefix := strings.CutSuffix(pat, "*"); {
		case pat == "*":
			m.all = true
		case isPrefix:
			prefixes = append(prefixes, name)
		default:
			if m.literal == nil {
				m.literal = map[string]struct{}{}
			}
			m.literal[pat] = struct{}{}
		}
	}
	slices.Sort(prefixes)
	for _, p := range prefixes {
		// Sorted, a prefix comes before every name it covers, and
		// everything between the two also starts with it: comparing
		// with the last kept one is enough.
		if n := len(m.prefixes); n > 0 && strings.HasPrefix(p, m.prefixes[n-1]) {
			continue
		}
		m.prefixes = append(m.prefixes, p)
	}
	return m
}

// match reports whether name matches a pattern. The empty name (which no
// channel has) matches "*" only: node-wide requests ask for it.
func (m *matcher) match(name string) bool {
	if m.all {
		return true
	}
	if name == "" {
		return false
	}
	if _, ok := m.literal[name]; ok {
		return true
	}
	// The greatest prefix <= name is the only candidate: with no prefix
	// of another in the set, any prefix p of name is followed in order
	// only by strings greater than name.
	i, found := slices.BinarySearch(m.prefixes, name)
	if found {
		return true
	}
	return i > 0 && strings.HasPrefix(name, m.prefixes[i-1])
}

// Principal returns the principal of that name, holding what the policy
// grants it (nothing for a name it does not list).
func (p *Policy) Principal(name string) Principal {
	return Principal{Name: name, g: p.principals[name]}
}

// Known reports whether the policy names the principal.
func (pr Principal) Known() bool { return pr.g != nil }

// Allows reports whether the principal holds action a on channel (a
// pchannel or a vchannel name). Every channel means the empty name: only
// a grant on "*" allows it.
func (pr Principal) Allows(a Action, channel string) bool {
	i := a.index()
	if pr.g == nil || i < 0 {
		return false
	}
	return pr.g[i].match(channel)
}

// AllowsIn applies the vchannel rule (package doc, "Vchannels"): a
// request on pchannel is allowed if the principal holds a on pchannel, or
// if the request is confined to vchannels, all of which it holds a on.
// vchannels yields the vchannel of each thing the request touches (each
// appended message, each name a read filters on); nil, no names, or an
// empty name (a message without a vchannel) means the request is not
// confined to vchannels.
func (pr Principal) AllowsIn(a Action, pchannel string, vchannels iter.Seq[string]) bool {
	if pr.Allows(a, pchannel) {
		return true
	}
	if vchannels == nil {
		return false
	}
	some := false
	for vc := range vchannels {
		if vc == "" || !pr.Allows(a, vc) {
			return false
		}
		some = true
	}
	return some
}

// principalByToken returns the principal whose token hash matches token's.
// Every entry is compared, in constant time, whichever matches.
func (p *Policy) principalByToken(token string) (Principal, bool) {
	sum := sha256Sum(token)
	found := -1
	for i := range p.tokens {
		if subtle.ConstantTimeCompare(sum[:], p.tokens[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return p.tokens[found].principal, true
}
