package archmap

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const modulePath = "github.com/shardfence/shardfence"

// layer is one row of the map: the packages it holds and the layers they
// may import (besides their own).
type layer struct {
	name     string
	patterns []string // "x" is package x; "x/..." is x and every package below it
	uses     []string
}

// readMap parses the table that follows the "## Package map" heading.
func readMap(t *testing.T, doc string) []layer {
	t.Helper()
	f, err := os.Open(doc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var layers []layer
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Package map"
			continue
		case !in || !strings.HasPrefix(line, "|"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "*")
		if name == "layer" || strings.HasPrefix(name, "---") {
			continue
		}
		layers = append(layers, layer{name: name, patterns: codeSpans(cells[1]), uses: words(cells[2])})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(layers) == 0 {
		t.Fatalf("%s has no package map (a table after the heading \"## Package map\")", doc)
	}
	names := map[string]bool{}
	for _, l := range layers {
		names[l.name] = true
	}
	for _, l := range layers {
		for _, u := range l.uses {
			if !names[u] {
				t.Fatalf("layer %q may use %q, which is not a layer of the map", l.name, u)
			}
		}
	}
	return layers
}

// codeSpans returns the `quoted` parts of a table cell.
func codeSpans(cell string) []string {
	var out []string
	parts := strings.Split(cell, "`")
	for i := 1; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}

// words returns the layer names of a "may import" cell ("-" for none).
func words(cell string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(cell, func(r rune) bool { return r == ',' || r == ' ' }) {
		if w = strings.Trim(w, "*`"); w != "" && w != "-" && w != "—" {
			out = append(out, w)
		}
	}
	return out
}

// layerOf returns the layer whose most specific pattern matches pkg.
func layerOf(layers []layer, pkg string) (string, bool) {
	best, bestLen := "", -1
	for _, l := range layers {
		for _, p := range l.patterns {
			n := -1
			if base, ok := strings.CutSuffix(p, "/..."); ok {
				if pkg == base || strings.HasPrefix(pkg, base+"/") {
					n = len(base)
				}
			} else if pkg == p {
				n = len(p) + 1 // an exact name beats a tree of the same name
			}
			if n > bestLen {
				best, bestLen = l.name, n
			}
		}
	}
	return best, bestLen >= 0
}

// sourceFiles calls fn with the path of every non-test Go file of the
// repository below root; testdata, node_modules, hidden and _ folders are
// skipped. Generated code is included.
func sourceFiles(root string, fn func(path string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		return fn(path)
	})
}

// imports returns each package of the repository (by its path below the
// module, "." for none) and the repository packages its non-test files
// import. Generated code is included; testdata and hidden folders are not.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string][]string{}
	err := sourceFiles(root, func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if dep, ok := strings.CutPrefix(p, modulePath+"/"); ok && !slices.Contains(out[pkg], dep) {
				out[pkg] = append(out[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// moduleRoot is the folder of the go.mod that declares modulePath, found
// by walking up from the test's folder.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module "+modulePath+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test's folder", modulePath)
		}
		dir = parent
	}
}

// check returns what breaks the map: a package on no row, or an import of
// a layer the importer's layer may not use.
func check(layers []layer, pkgs map[string][]string) []string {
	allowed := map[string]map[string]bool{}
	for _, l := range layers {
		allowed[l.name] = map[string]bool{l.name: true}
		for _, u := range l.uses {
			allowed[l.name][u] = true
		}
	}
	var problems []string
	for pkg, deps := range pkgs {
		from, ok := layerOf(layers, pkg)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is not on the package map", pkg))
			continue
		}
		for _, dep := range deps {
			to, ok := layerOf(layers, dep)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s imports %s, which is not on the package map", pkg, dep))
			} else if !allowed[from][to] {
				problems = append(problems, fmt.Sprintf("%s (%s) imports %s (%s): the map does not let %s use %s", pkg, from, dep, to, from, to))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// TestImportsFollowTheMap fails when a package is missing from
// docs/ARCHITECTURE.md's package map, or imports a package of a layer its
// own layer may not use: every arrow of the code must be one the map draws.
func TestImportsFollowTheMap(t *testing.T) {
	root := moduleRoot(t)
	layers := readMap(t, filepath.Join(root, "docs", "ARCHITECTURE.md"))
	pkgs := imports(t, root)
	if len(pkgs) < 40 {
		t.Fatalf("found only %d packages under %s: the walk went wrong", len(pkgs), root)
	}
	for _, p := range check(layers, pkgs) {
		t.Error(p)
	}
}

// TestTheMapCatchesAnUpwardImport checks the checker on a made-up map.
func TestTheMapCatchesAnUpwardImport(t *testing.T) {
	layers := []layer{
		{name: "base", patterns: []string{"internal/..."}},
		{name: "programs", patterns: []string{"cmd/...", "internal/harness/..."}, uses: []string{"base"}},
	}
	for _, c := range []struct{ pkg, want string }{
		{"internal/backoff", "base"},
		{"internal/harness/demo", "programs"},
		{"internal/harness", "programs"},
		{"cmd/shardfence", "programs"},
	} {
		if got, ok := layerOf(layers, c.pkg); !ok || got != c.want {
			t.Errorf("layerOf(%s) = %q, %v; want %q", c.pkg, got, ok, c.want)
		}
	}
	got := check(layers, map[string][]string{
		"internal/backoff":      nil,
		"internal/settle":       {"internal/harness/demo"}, // upward
		"internal/harness/demo": {"internal/backoff"},      // downward
		"cmd/shardfence":        {"internal/harness/demo"}, // sideways
		"sidecar":               nil,                       // on no row
	})
	want := []string{
		"internal/settle (base) imports internal/harness/demo (programs): the map does not let base use programs",
		"sidecar is not on the package map",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("check found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
