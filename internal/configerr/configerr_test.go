package configerr

import "testing"

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		file string
		line int
		path string
		want string
	}{
		{"p.yaml", 3, "roles.x", "authz: p.yaml:3: roles.x: bad"},
		{"p.yaml", 0, "", "authz: p.yaml: bad"},
		{"", 7, "a[1]", "authz: line 7: a[1]: bad"},
		{"", 0, "", "authz: bad"},
	} {
		if got := Format("authz", c.file, c.line, c.path, "bad"); got != c.want {
			t.Errorf("Format(%q, %d, %q) = %q, want %q", c.file, c.line, c.path, got, c.want)
		}
	}
}
