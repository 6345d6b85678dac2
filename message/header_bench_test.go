package message

import "testing"

// BenchmarkHeader: what reading a stored message's header costs, with
// reserved properties only (the common case) and with a user's property.
func BenchmarkHeader(b *testing.B) {
	for _, c := range []struct {
		name  string
		props map[string]string
	}{
		{"reserved", map[string]string{KeyTerm: "3", KeyTimeTick: "461234567890123456", KeyVChannel: "vc-1"}},
		{"user", map[string]string{KeyTerm: "3", KeyTimeTick: "461234567890123456", "table": "orders"}},
	} {
		m := Restore(make([]byte, 1024), c.props)
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				_ = m.Header()
			}
		})
	}
}
