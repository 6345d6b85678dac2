// Package errcheck holds one test: it reads the module's Go source and
// fails on the error patterns that hide a sentinel from the standard
// library's errors.Is, which is what callers use (STYLE.md, rule 15):
//
//   - cockroachdb's errors.Mark (its marks are seen by its own Is only):
//     use internal/errmark.Mark, fmt.Errorf with two %w, or a typed error
//     whose Is matches the sentinel;
//   - cockroachdb's errors.Handled and errors.Opaque (they hide the cause
//     from every errors.Is);
//   - a %w that cockroachdb does not unwrap: a second one in Newf, any in
//     Wrapf (they print %!w and unwrap neither);
//   - CombineErrors and WithSecondaryError, whose second error no errors.Is
//     sees (and the text leaves out), outside the uses listed below;
//   - an exported sentinel (var ErrX) that is not a plain comparable value
//     made once by errors.New (or Newf/fmt.Errorf without %w), or one that
//     is assigned again.
//
// It skips tests, generated code (api/, mocks/), testdata and nested
// modules (bench/).
package errcheck

import (
	"context"
	stderrors "errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	crerrors "github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/streamwal/streamwal/internal/errmark"
	"github.com/streamwal/streamwal/internal/errmark/errmarktest"
	"github.com/streamwal/streamwal/walimpls"
)

const (
	crdbErrors = "github.com/cockroachdb/errors"
	errmarkPkg = "github.com/streamwal/streamwal/internal/errmark"
	modulePath = "github.com/streamwal/streamwal"
)

// secondaryAllowed are the files whose CombineErrors or WithSecondaryError
// carry nothing a caller branches on in the hidden error, and why.
var secondaryAllowed = map[string]string{
	"meta/boltstore/store.go":           "both errors are meta.ErrInvalid; the first carries it",
	"meta/etcdstore/store.go":           "both errors are meta.ErrInvalid; the first carries it",
	"meta/metatest/parts_concurrent.go": "a test suite reporting two failures",
	"walconfig/backends.go":             "a close error after a failed build; callers branch on the build's",
}

// source is one parsed non-test file of the module.
type source struct {
	rel     string // slash path from the module root
	fset    *token.FileSet
	file    *ast.File
	imports map[string]string // local name -> import path
}

func (s source) pos(p token.Pos) string {
	at := s.fset.Position(p)
	return fmt.Sprintf("%s:%d", s.rel, at.Line)
}

// pkgOf returns the import path of the package x names, if x is an
// imported package's name.
func (s source) pkgOf(x ast.Expr) string {
	id, ok := x.(*ast.Ident)
	if !ok {
		return ""
	}
	return s.imports[id.Name]
}

// call returns the import path and name of a call's function, for calls
// of a package-level function of an imported package.
func (s source) call(c *ast.CallExpr) (pkg, name string) {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", ""
	}
	return s.pkgOf(sel.X), sel.Sel.Name
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+modulePath+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod of %s above the test", modulePath)
		dir = parent
	}
}

// parseModule parses every non-test Go file of the module.
func parseModule(t *testing.T) []source {
	t.Helper()
	root := moduleRoot(t)
	var out []source
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(path, root), string(filepath.Separator)))
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			switch {
			case strings.HasPrefix(name, "."), name == "testdata", name == "mocks", name == "vendor", name == "bin",
				rel == "api":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module (bench/)
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		s := source{rel: rel, fset: fset, file: f, imports: map[string]string{}}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			s.imports[name] = p
		}
		out = append(out, s)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(out), 100, "the walk found the module's files")
	return out
}

// format returns the constant format string argument i of c, if it is a
// literal (or a sum of literals).
func format(c *ast.CallExpr, i int) (string, bool) {
	if i >= len(c.Args) {
		return "", false
	}
	return constString(c.Args[i])
}

func constString(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok1 := constString(e.X)
		b, ok2 := constString(e.Y)
		return a + b, ok1 && ok2
	case *ast.ParenExpr:
		return constString(e.X)
	}
	return "", false
}

// TestNoHiddenSentinels fails on every call, in non-test code, that hides
// a sentinel from the standard errors.Is (see the package documentation).
func TestNoHiddenSentinels(t *testing.T) {
	var problems []string
	marks := 0
	secondaries := map[string]bool{} // files of secondaryAllowed that use one
	for _, s := range parseModule(t) {
		ast.Inspect(s.file, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			pkg, name := s.call(c)
			switch {
			case pkg == errmarkPkg && name == "Mark":
				marks++
				if len(c.Args) < 2 {
					problems = append(problems, s.pos(c.Pos())+": errmark.Mark without a mark")
				}
				for _, m := range c.Args[1:] {
					switch m.(type) {
					case *ast.Ident, *ast.SelectorExpr:
					default:
						problems = append(problems, s.pos(m.Pos())+": errmark.Mark's marks are sentinels (a name), not a value made at the call: nobody can match it")
					}
				}
			case pkg != crdbErrors && pkg != crdbErrors+"/markers":
			case name == "Mark":
				problems = append(problems, s.pos(c.Pos())+": errors.Mark: the standard errors.Is does not see its mark; use errmark.Mark")
			case name == "Handled", name == "HandledWithMessage", name == "HandledWithMessagef", name == "HandledInDomain", name == "Opaque":
				problems = append(problems, fmt.Sprintf("%s: errors.%s hides its cause from every errors.Is", s.pos(c.Pos()), name))
			case name == "CombineErrors", name == "WithSecondaryError":
				secondaries[s.rel] = true
				if _, ok := secondaryAllowed[s.rel]; !ok {
					problems = append(problems, fmt.Sprintf("%s: errors.%s: no errors.Is sees the second error, and the text leaves it out; use errors.Join", s.pos(c.Pos()), name))
				}
			case name == "Newf", name == "Errorf", name == "AssertionFailedf":
				if f, ok := format(c, 0); ok && strings.Count(f, "%w") > 1 {
					problems = append(problems, fmt.Sprintf("%s: errors.%s takes one %%w: a second prints %%!w and neither unwraps; use fmt.Errorf", s.pos(c.Pos()), name))
				}
			case name == "NewWithDepthf":
				if f, ok := format(c, 1); ok && strings.Count(f, "%w") > 1 {
					problems = append(problems, fmt.Sprintf("%s: errors.%s takes one %%w; use fmt.Errorf", s.pos(c.Pos()), name))
				}
			case name == "Wrapf", name == "WithMessagef":
				if f, ok := format(c, 1); ok && strings.Contains(f, "%w") {
					problems = append(problems, fmt.Sprintf("%s: errors.%s does not unwrap a %%w in its format (it prints %%!w); use fmt.Errorf", s.pos(c.Pos()), name))
				}
			case name == "WrapWithDepthf":
				if f, ok := format(c, 2); ok && strings.Contains(f, "%w") {
					problems = append(problems, fmt.Sprintf("%s: errors.%s does not unwrap a %%w in its format; use fmt.Errorf", s.pos(c.Pos()), name))
				}
			}
			return true
		})
	}
	for file := range secondaryAllowed {
		if !secondaries[file] {
			problems = append(problems, file+": listed in secondaryAllowed, but uses no secondary error any more: take it off the list")
		}
	}
	if len(problems) > 0 {
		t.Fatalf("errors hidden from the standard errors.Is:\n%s", strings.Join(problems, "\n"))
	}
	require.Greater(t, marks, 10, "the walk sees the errmark.Mark calls")
}

// TestSentinelsArePlain fails on an exported package-level Err... variable
// that is not a plain comparable sentinel: made once, by errors.New (the
// standard library's or cockroachdb's) or by Newf/fmt.Errorf of a constant
// format without %w, or naming another package's sentinel; and never
// assigned again.
func TestSentinelsArePlain(t *testing.T) {
	var problems []string
	sentinels := map[string]map[string]string{} // package dir -> name -> where
	sources := parseModule(t)
	for _, s := range sources {
		dir := filepath.Dir(filepath.FromSlash(s.rel))
		for _, d := range s.file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !id.IsExported() || !strings.HasPrefix(id.Name, "Err") {
						continue
					}
					where := s.pos(id.Pos())
					if sentinels[dir] == nil {
						sentinels[dir] = map[string]string{}
					}
					sentinels[dir][id.Name] = where
					if typ, ok := vs.Type.(*ast.Ident); vs.Type != nil && (!ok || typ.Name != "error") {
						problems = append(problems, where+": "+id.Name+" is not of type error")
					}
					if i >= len(vs.Values) {
						problems = append(problems, where+": "+id.Name+" has no value: a nil sentinel matches nothing")
						continue
					}
					if why := plainSentinel(s, vs.Values[i]); why != "" {
						problems = append(problems, where+": "+id.Name+" "+why)
					}
				}
			}
		}
	}
	// Assigned again, anywhere in its package's non-test code?
	for _, s := range sources {
		dir := filepath.Dir(filepath.FromSlash(s.rel))
		ast.Inspect(s.file, func(n ast.Node) bool {
			a, ok := n.(*ast.AssignStmt)
			if !ok || a.Tok != token.ASSIGN {
				return true
			}
			for _, lhs := range a.Lhs {
				if id, ok := lhs.(*ast.Ident); ok {
					if _, ok := sentinels[dir][id.Name]; ok {
						problems = append(problems, s.pos(id.Pos())+": sentinel "+id.Name+" assigned again")
					}
				}
			}
			return true
		})
	}
	n := 0
	for _, names := range sentinels {
		n += len(names)
	}
	require.Greater(t, n, 50, "the walk finds the module's sentinels")
	if len(problems) > 0 {
		t.Fatalf("exported sentinels that are not plain values:\n%s", strings.Join(problems, "\n"))
	}
}

// plainSentinel says what is wrong with a sentinel's value, "" if nothing.
func plainSentinel(s source, v ast.Expr) string {
	switch v := v.(type) {
	case *ast.SelectorExpr:
		if s.pkgOf(v.X) != "" && strings.HasPrefix(v.Sel.Name, "Err") {
			return "" // another package's sentinel, the same value
		}
	case *ast.CallExpr:
		pkg, name := s.call(v)
		switch {
		case (pkg == "errors" || pkg == crdbErrors) && name == "New" && len(v.Args) == 1:
			if _, ok := constString(v.Args[0]); ok {
				return ""
			}
			return "is made from a message that is not constant"
		case (pkg == "fmt" && name == "Errorf") || (pkg == crdbErrors && name == "Newf"):
			f, ok := format(v, 0)
			switch {
			case !ok:
				return "is made from a format that is not constant"
			case strings.Contains(f, "%w"):
				return "wraps another error: a sentinel is one plain value (wrap it where it is returned)"
			}
			return ""
		}
	}
	return fmt.Sprintf("is %s, not a plain sentinel made by errors.New", types(v))
}

// types names an expression's shape for a message.
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok {
				return "a call of " + x.Name + "." + sel.Sel.Name
			}
		}
		return "a call"
	case *ast.CompositeLit, *ast.UnaryExpr:
		return "a composite value"
	}
	return fmt.Sprintf("a %T", e)
}

// TestMarkHelpers checks every helper that marks an error with a sentinel
// with both errors.Is: the cause's sentinels stay visible, and so does
// the mark (or what the mark means, for walimpls' unexported outcome
// marks). meta/internal/storeerr.Mark, internal to meta, is errmark.Mark
// and tests itself the same way.
func TestMarkHelpers(t *testing.T) {
	sentinel := crerrors.New("test sentinel")
	cause := crerrors.Wrap(context.DeadlineExceeded, "test: call")

	marked := errmark.Mark(cause, sentinel)
	errmarktest.Is(t, marked, sentinel, context.DeadlineExceeded)
	errmarktest.Is(t, fmt.Errorf("outer: %w", marked), sentinel, context.DeadlineExceeded)
	errmarktest.Is(t, crerrors.Wrap(marked, "outer"), sentinel, context.DeadlineExceeded)
	require.Equal(t, cause.Error(), marked.Error())

	closed := crerrors.Wrap(walimpls.ErrClosed, "test: append")
	for name, err := range map[string]error{
		"MarkNotStored":      walimpls.MarkNotStored(closed),
		"MarkOutcomeUnknown": walimpls.MarkOutcomeUnknown(walimpls.MarkNotStored(closed)),
	} {
		errmarktest.Is(t, err, walimpls.ErrClosed)
		errmarktest.Is(t, crerrors.Wrap(err, "outer"), walimpls.ErrClosed)
		var target *walimpls.FencedError
		require.False(t, stderrors.As(err, &target), name)
	}
	require.True(t, walimpls.NotStored(fmt.Errorf("outer: %w (last: %w)", context.Canceled, walimpls.MarkNotStored(closed))))
	require.False(t, walimpls.NotStored(walimpls.MarkOutcomeUnknown(walimpls.MarkNotStored(closed))))
}
