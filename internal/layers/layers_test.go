// Package layers holds one test: it reads the imports of every package of
// the module and fails on an import that points up the layer order below,
// or on a package the order does not place. Go forbids import cycles; this
// forbids the quieter fault of a lower layer knowing a higher one (a test
// kit that starts backends importing chain, say). Only non-test files
// count: a package's tests may use any layer (walimpls's tests run on the
// memory backend).
//
// The order, lowest first; a package may import its own layer and those
// below it:
//
//	 0 base        message, utility/..., api/... (generated), mocks,
//	               security/tlsconf, security/certs, internal kits that
//	               import nothing of the module (errmark, configerr,
//	               scenario, testseed, etcdtest, pulsartest)
//	 1 cursor      cursor: where reading starts and resumes, the one
//	               vocabulary of backends, adaptor and chains (tolerated
//	               absent)
//	 2 meta        meta, meta/... (the key-value stores)
//	 3 walimpls    walimpls, walimpls/internal/..., walimpls/walimplstest,
//	               mocks/walimpls, internal/readback
//	 4 backends    walimpls/impls/..., internal/s3test, internal/s3dev,
//	               internal/backendstest
//	 5 adaptor     adaptor, adaptor/..., mocks/adaptor
//	 6 walmanager  walmanager, walmanager/..., mocks/walmanager (owns WAL
//	               lifetimes through a WALOpener that chainwal provides)
//	 7 chains      chain, chainread, chainwal
//	 8 services    vchannel, pool, consumers, retention
//	 9 control     cluster, coordinator, node, security/authz
//	10 client      client
//	11 config      walconfig (configuration, backend entries, store wiring)
//	12 commands    cmd/..., examples, internal/cmd/...
//
// A package is placed by the longest prefix of its path in the table. An
// internal/ package the table does not name (a new test kit) is placed by
// what it imports: at the highest layer among its imports, so that it can
// break no rule itself but a package below that layer cannot use it.
package layers

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/streamwal/streamwal"

// layerNames are the layers, lowest first.
var layerNames = []string{"base", "cursor", "meta", "walimpls", "backends", "adaptor", "walmanager",
	"chains", "services", "control", "client", "config", "commands"}

// placed puts packages (by their path in the module, or a prefix of it) on
// a layer, by its name.
var placed = map[string]string{
	"message":               "base",
	"utility":               "base",
	"api":                   "base",
	"mocks":                 "base",
	"security/tlsconf":      "base",
	"security/certs":        "base",
	"internal/errmark":      "base",
	"internal/configerr":    "base",
	"internal/scenario":     "base",
	"internal/testseed":     "base",
	"internal/etcdtest":     "base",
	"internal/pulsartest":   "base",
	"internal/errcheck":     "base",
	"internal/layers":       "base",
	"meta":                  "meta",
	"walimpls":              "walimpls",
	"mocks/walimpls":        "walimpls",
	"internal/readback":     "walimpls",
	"walimpls/impls":        "backends",
	"internal/s3test":       "backends",
	"internal/s3dev":        "backends",
	"internal/backendstest": "backends",
	"cursor":                "cursor",
	"adaptor":               "adaptor",
	"mocks/adaptor":         "adaptor",
	"walmanager":            "walmanager",
	"mocks/walmanager":      "walmanager",
	"chain":                 "chains",
	"chainread":             "chains",
	"chainwal":              "chains",
	"vchannel":              "services",
	"pool":                  "services",
	"consumers":             "services",
	"retention":             "services",
	"cluster":               "control",
	"coordinator":           "control",
	"node":                  "control",
	"security/authz":        "control",
	"client":                "client",
	"walconfig":             "config",
	"cmd":                   "commands",
	"examples":              "commands",
	"internal/cmd":          "commands",
}

// TestNoUpwardImport: no package of the module imports one of a higher
// layer, and every package has a layer.
func TestNoUpwardImport(t *testing.T) {
	g := readGraph(t)
	require.NotEmpty(t, g)
	for _, want := range []string{"walimpls", "adaptor", "chainwal", "node"} {
		require.Contains(t, g, want, "the module's packages were not all read")
	}
	for _, p := range problems(g) {
		t.Error(p)
	}
}

// TestTheRuleBites: the check reports an upward import, a package it
// cannot place, and a new internal kit that places itself above a user.
func TestTheRuleBites(t *testing.T) {
	g := map[string][]string{
		"message":               nil,
		"chain":                 {"message"},
		"internal/backendstest": {"chain", "walimpls/impls/memory"},
		"walimpls/impls/memory": {"message"},
		"newthing":              {"message"},
		"internal/newkit":       {"adaptor"},
		"adaptor":               {"message"},
		"walimpls":              {"internal/newkit"},
	}
	got := strings.Join(problems(g), "\n")
	require.Contains(t, got, "internal/backendstest (backends) imports chain (chains)")
	require.Contains(t, got, "newthing: no layer")
	require.Contains(t, got, "walimpls (walimpls) imports internal/newkit (adaptor)")
	require.NotContains(t, got, "memory")
}

// problems lists, sorted, each package without a layer and each import of
// g (package → its imports in the module, paths relative to the module)
// that points up.
func problems(g map[string][]string) []string {
	var out []string
	for _, pkg := range slices.Sorted(maps.Keys(g)) {
		from, ok := layerOf(g, pkg, nil)
		if !ok {
			out = append(out, fmt.Sprintf("%s: no layer: place it in the table of internal/layers", pkg))
			continue
		}
		for _, imp := range g[pkg] {
			to, ok := layerOf(g, imp, nil)
			if ok && to > from {
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s): an arrow up the layers", pkg, layerNames[from], imp, layerNames[to]))
			}
		}
	}
	return out
}

// layerOf places pkg: by the longest prefix in placed, or, for an internal/
// package the table does not name, at the highest layer among its imports.
// seen guards against a cycle (which Go forbids anyway).
func layerOf(g map[string][]string, pkg string, seen []string) (int, bool) {
	for p := pkg; p != "." && p != ""; p = path.Dir(p) {
		if name, ok := placed[p]; ok {
			return slices.Index(layerNames, name), true
		}
	}
	if !strings.HasPrefix(pkg, "internal/") || slices.Contains(seen, pkg) {
		return 0, false
	}
	top := 0
	for _, imp := range g[pkg] {
		l, ok := layerOf(g, imp, append(seen, pkg))
		if !ok {
			return 0, false
		}
		top = max(top, l)
	}
	return top, true
}

// readGraph parses the imports of every non-test Go file of the module
// (skipping testdata, hidden directories and nested modules) into package
// → the module's packages it imports, as paths relative to the module.
func readGraph(t *testing.T) map[string][]string {
	t.Helper()
	root := moduleRoot(t)
	g := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "bin") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != root {
				return filepath.SkipDir // a nested module (bench/)
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		imps := g[pkg]
		for _, is := range f.Imports {
			ip, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return err
			}
			if in, ok := strings.CutPrefix(ip, modulePath+"/"); ok && !slices.Contains(imps, in) {
				imps = append(imps, in)
			}
		}
		g[pkg] = imps
		return nil
	})
	require.NoError(t, err)
	return g
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
