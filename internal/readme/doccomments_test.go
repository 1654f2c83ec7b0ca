package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The module's packages whose names doc comments cite as pkg.Name, by directory.
var citedPackages = map[string]string{
	"activity":     "activity",
	"activitytest": "activitytest",
	"keys":         "keys",
	"migrate":      "migrate",
	"saga":         "saga",
	"outbox":       "outbox",
	"inbox":        "inbox",
	"webhook":      "webhook",
	"downstream":   "downstream",
	"fakepay":      "downstream/fakepay",
	"worker":       "worker",
	"operator":     "operator",
	"telemetry":    "telemetry",
}

// sdkTwins are the SDK's packages of the same name as one of ours: a comment that cites
// activity.GetInfo means Temporal's.
var sdkTwins = map[string]string{
	"activity": "go.temporal.io/sdk/activity",
	"worker":   "go.temporal.io/sdk/worker",
}

var citation = regexp.MustCompile(`\b([a-z]+)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?`)

// TestDocCommentsNameWhatExists reads every doc comment of the module's Go files (tests and
// examples too) and fails for each pkg.Name or pkg.Type.Member that cites one of the module's
// packages and names nothing in it (nor in the SDK's package of the same name): go doc must
// name only things that exist.
func TestDocCommentsNameWhatExists(t *testing.T) {
	root := "../.."
	names := map[string]map[string]bool{} // package → its top-level names and Type.Member
	for pkg, dir := range citedPackages {
		names[pkg] = declared(t, filepath.Join(root, dir))
	}
	for pkg, path := range sdkTwins {
		out, err := exec.Command("go", "list", "-f", "{{.Dir}}", path).Output()
		require.NoError(t, err, "go list %s", path)
		for n := range declared(t, strings.TrimSpace(string(out))) {
			names[pkg][n] = true
		}
	}

	var missing []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != ".." && (strings.HasPrefix(n, ".") || n == "bin" || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			for _, m := range citation.FindAllStringSubmatch(cg.Text(), -1) {
				known, ok := names[m[1]]
				if !ok || known[m[2]] && (m[3] == "" || known[m[2]+"."+m[3]] || !known["type "+m[2]] || known["alias "+m[2]]) {
					continue
				}
				rel, _ := filepath.Rel(root, path)
				missing = append(missing, rel+": "+m[0])
			}
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(missing)
	require.Empty(t, compact(missing), "doc comments that name what does not exist")
}

// declared returns the top-level names declared in the non-test Go files of dir, each type's
// fields and methods as Type.Member, and "type T" for each type.
func declared(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err, "read %s", dir)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					out[d.Name.Name] = true
					continue
				}
				out[receiver(d.Recv.List[0].Type)+"."+d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						out[s.Name.Name], out["type "+s.Name.Name] = true, true
						members(out, s.Name.Name, s.Type)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							out[n.Name] = true
						}
					}
				}
			}
		}
	}
	return out
}

// members records the fields of a struct type and the methods of an interface type as T.Name;
// an embedded field is named after its type.
func members(out map[string]bool, typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		out["alias "+typ] = true
		return
	}
	for _, f := range fields.List {
		if len(f.Names) == 0 {
			out[typ+"."+receiver(f.Type)] = true
			continue
		}
		for _, n := range f.Names {
			out[typ+"."+n.Name] = true
		}
	}
}

// receiver returns the name of the type in a receiver or an embedded field: T for T, *T, T[P],
// pkg.T.
func receiver(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiver(e.X)
	case *ast.IndexExpr:
		return receiver(e.X)
	case *ast.IndexListExpr:
		return receiver(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// compact removes repeated lines.
func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
