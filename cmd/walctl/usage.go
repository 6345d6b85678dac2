package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/cockroachdb/errors"
)

// help runs "walctl help [<command>]".
func help(args []string, e env) int {
	var o options
	fs := newFlagSet("help", nil, &o)
	pos, err := parseInterspersed(fs, args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(e.errOut, "walctl help:", err)
		printUsage(e.errOut)
		return exitUsage
	}
	if len(pos) > 0 && pos[0] == "help" {
		pos = pos[1:]
	}
	switch len(pos) {
	case 0:
		printUsage(e.out)
		return exitOK
	case 1:
		if cmd := lookup(pos[0]); cmd != nil {
			printHelp(e.out, cmd)
			return exitOK
		}
		fmt.Fprintf(e.errOut, "walctl help: unknown command %q\n", pos[0])
	default:
		fmt.Fprintln(e.errOut, "walctl help: wants at most one command")
	}
	printUsage(e.errOut)
	return exitUsage
}

func usageError(e env, cmd *command, msg string) int {
	fmt.Fprintf(e.errOut, "walctl %s: %s\n", cmd.name, msg)
	printHelp(e.errOut, cmd)
	return exitUsage
}

func printUsage(w io.Writer) {
	var b bytes.Buffer
	b.WriteString("usage: walctl [flags] <command> [arguments] [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-34s %s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(&b, "  %-34s %s\n", "help [<command>]", "this text, or a command's own")
	b.WriteString("\nflags of every command:\n")
	var o options
	fs := newFlagSet("walctl", nil, &o)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	b.WriteString("\nExit status: 0 done, 1 failed or refused (with the reason; nothing takes effect later), 2 bad command line,\n" +
		"3 pending: migrate gave up, but a migration may still take effect (with the command that cancels or undoes it).\n")
	_, _ = w.Write(b.Bytes())
}

func printHelp(w io.Writer, cmd *command) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "usage: walctl %s [flags]", cmd.name)
	if cmd.args != "" {
		fmt.Fprintf(&b, " %s", cmd.args)
	}
	fmt.Fprintf(&b, "\n\n%s.\n", upperFirst(cmd.summary))
	if cmd.detail != "" {
		fmt.Fprintf(&b, "\n%s\n", cmd.detail)
	}
	var o options
	fs := newFlagSet(cmd.name, cmd.flags, &o)
	fs.SetOutput(&b)
	b.WriteString("\nflags:\n")
	fs.PrintDefaults()
	_, _ = w.Write(b.Bytes())
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// newFlagSet is a flag set with the global flags and the named ones; it
// prints nothing itself.
func newFlagSet(name string, own []string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("walctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, d := range globalFlags {
		d.define(fs, o)
	}
	for _, d := range securityFlags {
		d.define(fs, o)
	}
	for _, n := range own {
		if d, ok := commandFlags[n]; ok {
			d.define(fs, o)
		} else {
			certsFlags[n].define(fs, o)
		}
	}
	return fs
}

// parseInterspersed parses flags anywhere among args and returns the
// positional arguments in order; everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, nil
}

// findCommand returns the first positional argument of args, skipping the
// flags (and the values of those that take one, as any command defines
// them), or "" if there is none.
func findCommand(args []string) string {
	takesValue := map[string]bool{}
	for _, d := range append(globalFlags, securityFlags...) {
		takesValue[d.name] = !d.isBool
	}
	for _, d := range commandFlags {
		takesValue[d.name] = !d.isBool
	}
	for _, d := range certsFlags {
		takesValue[d.name] = !d.isBool
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case len(a) < 2 || a[0] != '-':
			return a
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && takesValue[name] {
			i++ // its value
		}
	}
	return ""
}

func isHelpFlag(a string) bool {
	switch a {
	case "-h", "-help", "--h", "--help":
		return true
	}
	return false
}
