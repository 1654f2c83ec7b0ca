package readme

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// faceLimit is how many exported top-level names activity may have, not counting those kept for
// one release with a Deprecated: paragraph: the package is the face users learn, and everything
// that is not part of writing an activity lives in operator, migrate, telemetry or internal/.
// 47 since issue 41 (authorization at replay): a refusal is an error kind of its own, and each
// kind costs its typed error and its ErrType string (UnauthorizedError, ErrTypeUnauthorized);
// the hook itself is a field (Config, Options, Call.Authorize) and costs no name.
const faceLimit = 47

// TestActivityIsASmallFace counts activity's exported top-level names (functions, types,
// constants and variables, in files that are not tests) and fails when more than faceLimit are
// not deprecated, listing them.
func TestActivityIsASmallFace(t *testing.T) {
	names := faceNames(t, "../../activity")
	require.LessOrEqual(t, len(names), faceLimit,
		"activity exports %d names that are not deprecated (at most %d): %s; does each belong on the face, or in operator, migrate, telemetry or internal/?",
		len(names), faceLimit, strings.Join(names, ", "))
}

// TestNoSourceFileOver400Lines fails for every Go file, tests aside, in activity/ and internal/
// longer than 400 lines: a file is one concern a reader can hold at once.
func TestNoSourceFileOver400Lines(t *testing.T) {
	var long []string
	for _, dir := range []string{"../../activity", "../../internal"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			if n := lines(t, path); n > 400 {
				long = append(long, strings.TrimPrefix(path, "../../")+" ("+strconv.Itoa(n)+")")
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Empty(t, long, "files over 400 lines: split each by concern")
}

// faceNames returns the exported top-level names of the package in dir that carry no Deprecated:
// paragraph, sorted.
func faceNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	var names []string
	add := func(name *ast.Ident, docs ...*ast.CommentGroup) {
		if !name.IsExported() {
			return
		}
		for _, d := range docs {
			if deprecated(d) {
				return
			}
		}
		names = append(names, name.Name)
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(d.Name, d.Doc)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						add(s.Name, d.Doc, s.Doc)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n, d.Doc, s.Doc)
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

// deprecated reports whether a doc comment has a paragraph that starts "Deprecated: ", as go doc
// and pkg.go.dev read it.
func deprecated(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, para := range strings.Split(doc.Text(), "\n\n") {
		if strings.HasPrefix(para, "Deprecated: ") {
			return true
		}
	}
	return false
}

func lines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
	}
	require.NoError(t, sc.Err())
	return n
}

// TestFaceCountsWhatIsNotDeprecated checks the counter itself on a package written for it: a
// deprecated name in a group, a deprecated spec and a deprecated function are left out, methods
// and unexported names are never counted, and everything else is.
func TestFaceCountsWhatIsNotDeprecated(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// Deprecated: use New.
const Old = 1

const (
	// Kept is counted.
	Kept = 2
	// Gone is not.
	//
	// Deprecated: use Kept.
	Gone = 3
	hidden = 4
)

// Deprecated: use T.
type U = T

// T is counted; its method is not.
type T struct{}

func (T) M() {}

// New mentions Deprecated: mid-sentence, which is not a deprecation.
func New() T { return T{} }
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nvar Tested = 1\n"), 0o600))
	require.Equal(t, []string{"Kept", "New", "T"}, faceNames(t, dir))
}
