// Package configerr formats the errors of configuration files the same way
// in every package that reads one (walconfig, security/authz): where the
// problem is (file and line, then the key path) and what it is.
package configerr

import (
	"fmt"
	"strings"
)

// Format returns "<prefix>: <file>:<line>: <path>: <msg>", leaving out
// what is unknown: an empty file or path, a line of 0.
func Format(prefix, file string, line int, path, msg string) string {
	var b strings.Builder
	b.WriteString(prefix + ": ")
	switch {
	case file != "" && line > 0:
		fmt.Fprintf(&b, "%s:%d: ", file, line)
	case file != "":
		b.WriteString(file + ": ")
	case line > 0:
		fmt.Fprintf(&b, "line %d: ", line)
	}
	if path != "" {
		b.WriteString(path + ": ")
	}
	b.WriteString(msg)
	return b.String()
}
