package keys_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
)

// fingerprintSeedEnv sets the seed of TestFingerprintIntentProperty, to replay a failure.
const fingerprintSeedEnv = "TEMPOTENT_FINGERPRINT_SEED"

// Named types that reflect.StructOf cannot make: an embedded unexported struct (StructOf embeds
// exported types only) and an embedded named non-struct type. Field 0 of every struct is its
// marker (see probeVisible).
type (
	PropInt    int
	propHidden struct {
		MHidden int
		H       int `tempotent:"intent"`
		A       []int
	}
	// PropHiddenHost promotes H, an intent field, from an unexported embedded struct.
	PropHiddenHost struct {
		MHiddenHost int
		propHidden
		B int
	}
	// PropHiddenPtrHost shadows propHidden.A, which is not tagged, with its own intent A.
	PropHiddenPtrHost struct {
		MHiddenPtrHost int
		*propHidden
		A int `tempotent:"intent"`
	}
	// PropShadowHost shadows propHidden.H, tagged intent, with its own H: a tag error.
	PropShadowHost struct {
		MShadowHost int
		*propHidden
		H string
	}
)

// TestFingerprintIntentProperty builds random struct shapes (embedding at several depths, the same
// struct promoted along several paths, shadowing, conflicts, json names and "-", unexported
// fields, tempotent tags) and random pairs of values of each, and checks FingerprintOf against a
// model written here from the documented rules and encoding/json's own output:
//
//   - FingerprintOf refuses the shape exactly when an intent tag in one of its JSON objects is
//     on a field that encoding/json does not encode along any path that promotes it. What
//     encoding/json encodes is found by encoding a value with a distinct marker in every field.
//   - Otherwise two values share a fingerprint exactly when encoding/json writes the same JSON for
//     their projections: in each object, the fields left out (tagged "-", or not intent in an
//     object with an intent field) set to zero, and nil slices and maps made empty unless the
//     field is tagged keepnil.
//
// Set TEMPOTENT_FINGERPRINT_SEED to replay the seed a failure prints.
func TestFingerprintIntentProperty(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(fingerprintSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s must be an unsigned integer", fingerprintSeedEnv)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d; replay with %s=%d go test ./keys/ -run TestFingerprintIntentProperty", seed, fingerprintSeedEnv, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0x7e3907e47))
	g := &shapeGen{rng: rng}
	const shapes, pairs = 1000, 6
	refused, same, differ, sameButJSONDiffers := 0, 0, 0, 0
	for range shapes {
		typ := g.structType(3)
		bad, why := modelRefuses(typ)
		if bad {
			refused++
		}
		for range pairs {
			a, b := g.valuePair(typ)
			fa, errA := keys.FingerprintOf(a.Interface())
			fb, errB := keys.FingerprintOf(b.Interface())
			if bad {
				require.ErrorIs(t, errA, keys.ErrNotCanonicalizable, "%s: %s; want it refused", typ, why)
				require.ErrorContains(t, errA, "does not encode")
				require.ErrorIs(t, errB, keys.ErrNotCanonicalizable)
				break
			}
			require.NoError(t, errA, "%s", typ)
			require.NoError(t, errB, "%s", typ)
			pa, pb := marshalProjection(t, a), marshalProjection(t, b)
			ja, _ := json.Marshal(a.Interface())
			jb, _ := json.Marshal(b.Interface())
			if bytes.Equal(pa, pb) {
				same++
				if !bytes.Equal(ja, jb) {
					sameButJSONDiffers++
				}
			} else {
				differ++
			}
			require.Equal(t, bytes.Equal(pa, pb), fa.Matches(fb),
				"shape %s\na  %s\nb  %s\nprojections\n   %s\n   %s\nfingerprints %s %s", typ, ja, jb, pa, pb, fa, fb)
		}
	}
	t.Logf("%d shapes, %d refused; pairs of valid shapes: %d same, of which %d differ in their JSON, %d different", shapes, refused, same, sameButJSONDiffers, differ)
	// The generator must make both kinds of shape, or the test proves little.
	require.Greater(t, refused, shapes/20, "too few shapes with an intent tag on a dropped field")
	require.Less(t, refused, shapes*3/4, "too few valid shapes")
}

// shapeGen makes random struct types and values.
type shapeGen struct {
	rng        *rand.Rand
	next       int            // numbers the marker fields, so that every generated type is new
	embeddable []reflect.Type // the types made so far, embedded again to promote one type twice
}

var (
	leafTypes = []reflect.Type{
		reflect.TypeFor[int](), reflect.TypeFor[string](), reflect.TypeFor[[]int](),
		reflect.TypeFor[map[string]int](), reflect.TypeFor[*int](), reflect.TypeFor[*[]int](),
	}
	namedEmbeddable = []reflect.Type{
		reflect.TypeFor[PropHiddenHost](), reflect.TypeFor[PropHiddenPtrHost](), reflect.TypeFor[PropShadowHost](),
	}
	goNames   = []string{"A", "B", "C", "H"}
	jsonTags  = []string{"", "", "", "", "A", "B", "a", "-", "B,omitempty"}
	tempoTags = []string{"", "", "", "", "", "", "", "", "intent", "intent", "-", "keepnil", "intent,keepnil"}
)

func (g *shapeGen) pick(s []string) string { return s[g.rng.IntN(len(s))] }

// structType makes a struct type: a marker field, then up to five fields of which some embed
// other structs, made anew (up to depth more levels), made before, or named.
func (g *shapeGen) structType(depth int) reflect.Type {
	g.next++
	fields := []reflect.StructField{{Name: "M" + strconv.Itoa(g.next), Type: reflect.TypeFor[int]()}}
	used := map[string]bool{}
	for i := range 1 + g.rng.IntN(5) {
		var f reflect.StructField
		switch r := g.rng.IntN(12); {
		case r < 5:
			f = reflect.StructField{Name: g.pick(goNames), Type: leafTypes[g.rng.IntN(len(leafTypes))]}
		case r == 5:
			f = reflect.StructField{Name: g.pick([]string{"x", "y"}), PkgPath: "github.com/tempotent/tempotent/keys_test", Type: reflect.TypeFor[int]()}
		case r == 6:
			f = reflect.StructField{Name: "PropInt", Type: reflect.TypeFor[PropInt](), Anonymous: true}
		case r == 7:
			et := namedEmbeddable[g.rng.IntN(len(namedEmbeddable))]
			f = reflect.StructField{Name: et.Name(), Type: et, Anonymous: true}
		case depth == 0:
			continue
		case r == 8:
			f = reflect.StructField{Name: "N" + strconv.Itoa(i), Type: g.maybePointer(g.structType(depth - 1))}
		default:
			et := g.structType(depth - 1)
			if len(g.embeddable) > 0 && g.rng.IntN(2) == 0 {
				et = g.embeddable[g.rng.IntN(len(g.embeddable))]
			}
			f = reflect.StructField{Name: "E" + strconv.Itoa(i), Type: g.maybePointer(et), Anonymous: true}
		}
		if used[f.Name] {
			continue
		}
		used[f.Name] = true
		var tag []string
		if j := g.pick(jsonTags); j != "" {
			tag = append(tag, `json:"`+j+`"`)
		}
		if o := g.pick(tempoTags); o != "" {
			tag = append(tag, `tempotent:"`+o+`"`)
		}
		f.Tag = reflect.StructTag(strings.Join(tag, " "))
		fields = append(fields, f)
	}
	t := reflect.StructOf(fields)
	g.embeddable = append(g.embeddable, t)
	return t
}

func (g *shapeGen) maybePointer(t reflect.Type) reflect.Type {
	if g.rng.IntN(3) == 0 {
		return reflect.PointerTo(t)
	}
	return t
}

// valuePair makes two values of t. Every node of a value draws from a generator seeded by its
// path; b redraws some nodes (or all) with another seed, so that the pair often differs in one
// or two places only.
func (g *shapeGen) valuePair(t reflect.Type) (a, b reflect.Value) {
	seedA, seedB, mut := g.rng.Uint64(), g.rng.Uint64(), g.rng.Uint64()
	every := uint64(1 + g.rng.IntN(8)) // b redraws about one node in every
	a, b = reflect.New(t).Elem(), reflect.New(t).Elem()
	fill(a, "", func(string) uint64 { return seedA })
	fill(b, "", func(path string) uint64 {
		if pathHash(path, mut)%every == 0 {
			return seedB
		}
		return seedA
	})
	return a, b
}

func pathHash(path string, seed uint64) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, path)
	return h.Sum64()
}

// fill sets v, which must be addressable, to a random value: small ints and strings, nil, empty
// and short slices and maps, nil and set pointers.
func fill(v reflect.Value, path string, seedOf func(path string) uint64) {
	v = writable(v)
	r := rand.New(rand.NewPCG(seedOf(path), pathHash(path, 1)))
	switch v.Kind() {
	case reflect.Int:
		v.SetInt(int64(r.IntN(3)))
	case reflect.String:
		v.SetString([]string{"", "x", "y"}[r.IntN(3)])
	case reflect.Slice:
		switch r.IntN(4) {
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		case 2, 3:
			v.Set(reflect.ValueOf([]int{r.IntN(3)}))
		}
	case reflect.Map:
		switch r.IntN(4) {
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
		case 2, 3:
			v.Set(reflect.ValueOf(map[string]int{"k": r.IntN(3)}))
		}
	case reflect.Pointer:
		if r.IntN(4) != 0 {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), path+"*", seedOf)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), path+"."+strconv.Itoa(i), seedOf)
		}
	}
}

// writable returns v, addressable, without the read-only mark of an unexported field, so that the
// test can build any value.
func writable(v reflect.Value) reflect.Value {
	if v.CanSet() || !v.CanAddr() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

// modelField is a field of a JSON object as the documented rules see it: the object's own fields
// and those of the embedded structs whose fields encoding/json promotes into it, at any depth.
type modelField struct {
	path      []int
	owner     reflect.Type
	sf        reflect.StructField
	promoted  bool // an embedded struct without a JSON name: its fields are the object's
	intent    bool
	exclude   bool
	keepNil   bool
	inIntent  bool // promoted through an embedded struct tagged intent
	inExclude bool // promoted through an embedded struct tagged "-"
}

func jsonName(sf reflect.StructField) (name string, skip bool) {
	tag := sf.Tag.Get("json")
	name, _, _ = strings.Cut(tag, ",")
	return name, tag == "-"
}

func structOf(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, t.Kind() == reflect.Struct
}

// objectFields walks struct t as one JSON object, depth first.
func objectFields(t reflect.Type) []modelField {
	var out []modelField
	var walk func(s reflect.Type, path []int, inIntent, inExclude bool)
	walk = func(s reflect.Type, path []int, inIntent, inExclude bool) {
		for i := range s.NumField() {
			sf := s.Field(i)
			name, skip := jsonName(sf)
			st, isStruct := structOf(sf.Type)
			opts := sf.Tag.Get("tempotent")
			f := modelField{
				path: append(append([]int(nil), path...), i), owner: s, sf: sf,
				promoted: sf.Anonymous && isStruct && name == "" && !skip,
				intent:   strings.Contains(opts, "intent"), exclude: opts == "-",
				keepNil: strings.Contains(opts, "keepnil"), inIntent: inIntent, inExclude: inExclude,
			}
			out = append(out, f)
			if f.promoted {
				walk(st, f.path, inIntent || f.intent, inExclude || f.exclude)
			}
		}
	}
	walk(t, nil, false, false)
	return out
}

func under(path, prefix []int) bool {
	return len(path) >= len(prefix) && slices.Equal(path[:len(prefix)], prefix)
}

// probeVisible returns the fields of object t (by their index in fields) that encoding/json
// encodes, each with the name of the member of t's JSON object that holds it: it sets each field
// that is not promoted to a distinct marker number (a nested struct's marker field, field 0, for a
// nested struct) and looks for the markers in the JSON.
func probeVisible(t reflect.Type, fields []modelField) map[int]string {
	v := reflect.New(t).Elem()
	markers := map[int64]int{}
	for i, f := range fields {
		if f.promoted {
			continue
		}
		m := int64(1000 + i)
		markers[m] = i
		fv := v
		for _, j := range f.path {
			if fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					writable(fv).Set(reflect.New(fv.Type().Elem()))
				}
				fv = fv.Elem()
			}
			fv = fv.Field(j)
		}
		setMarker(writable(fv), m)
	}
	raw, err := json.Marshal(v.Interface())
	if err != nil {
		panic(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		panic(err)
	}
	visible := map[int]string{}
	var find func(member string, x any)
	find = func(member string, x any) {
		switch x := x.(type) {
		case map[string]any:
			for _, e := range x {
				find(member, e)
			}
		case []any:
			for _, e := range x {
				find(member, e)
			}
		case json.Number:
			if n, err := x.Int64(); err == nil {
				if i, ok := markers[n]; ok {
					visible[i] = member
				}
			}
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				if i, ok := markers[n]; ok {
					visible[i] = member
				}
			}
		}
	}
	for member, x := range doc {
		find(member, x)
	}
	return visible
}

func setMarker(v reflect.Value, m int64) {
	switch v.Kind() {
	case reflect.Int:
		v.SetInt(m)
	case reflect.String:
		v.SetString(strconv.FormatInt(m, 10))
	case reflect.Slice:
		v.Set(reflect.ValueOf([]int{int(m)}))
	case reflect.Map:
		v.Set(reflect.ValueOf(map[string]int{"k": int(m)}))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		setMarker(v.Elem(), m)
	case reflect.Struct:
		setMarker(writable(v.Field(0)), m)
	}
}

// modelRefuses reports whether FingerprintOf must refuse t: whether a JSON object in it (t, or a
// struct in one of its fields that encoding/json sees, at any depth) has an intent tag, not
// inside an embedded struct tagged "-", on a field that encoding/json encodes along none of the
// paths that promote it (an embedded struct's tag needs one of its promoted fields encoded), or
// whether a field that an intent tag brings into the intent (its own, or one on an embedded struct
// that promotes it) is dropped by encoding/json and the field that encoding/json writes under its
// name is not part of the intent. A field dropped with no other written under its name (all the
// fields of that name conflict) is no reason to refuse: the JSON has nothing there to leave out.
func modelRefuses(t reflect.Type) (bool, string) {
	seen := map[reflect.Type]bool{}
	var check func(t reflect.Type) (bool, string)
	check = func(t reflect.Type) (bool, string) {
		if seen[t] {
			return false, ""
		}
		seen[t] = true
		fields := objectFields(t)
		visible := probeVisible(t, fields)
		type key struct {
			owner reflect.Type
			field int
		}
		honoured := map[key]bool{}
		for _, f := range fields {
			_, isStruct := structOf(f.sf.Type)
			if _, skip := jsonName(f.sf); f.intent && (skip || !f.sf.IsExported() && !(f.sf.Anonymous && isStruct)) {
				// encoding/json never encodes it, wherever the struct that declares it is.
				return true, fmt.Sprintf("%s.%s is tagged intent and unexported or json:\"-\"", f.owner, f.sf.Name)
			}
			if !f.intent || f.inExclude {
				continue
			}
			k := key{f.owner, f.sf.Index[0]}
			for j, g := range fields {
				if _, ok := visible[j]; ok && under(g.path, f.path) {
					honoured[k] = true
				}
			}
			if _, ok := honoured[k]; !ok {
				honoured[k] = false
			}
		}
		for k, ok := range honoured {
			if !ok {
				return true, fmt.Sprintf("%s.%s, in %s, is tagged intent and not encoded", k.owner, k.owner.Field(k.field).Name, t)
			}
		}
		counted := func(f modelField) bool { return (f.intent || f.inIntent) && !f.exclude && !f.inExclude }
		for i, f := range fields {
			_, isStruct := structOf(f.sf.Type)
			name, skip := jsonName(f.sf)
			if _, ok := visible[i]; ok || f.promoted || !counted(f) || skip || !f.sf.IsExported() && !(f.sf.Anonymous && isStruct) {
				continue
			}
			if name == "" {
				name = f.sf.Name
			}
			for j, member := range visible {
				if member == name && !counted(fields[j]) {
					return true, fmt.Sprintf("%s.%s, in %s, is in the intent and dropped, and %s.%s, which encoding/json writes as %q instead, is not in the intent",
						f.owner, f.sf.Name, t, fields[j].owner, fields[j].sf.Name, name)
				}
			}
		}
		for _, f := range fields {
			_, skip := jsonName(f.sf)
			if f.promoted || skip || !f.sf.IsExported() && !f.sf.Anonymous {
				continue
			}
			if st, ok := structOf(f.sf.Type); ok {
				if bad, why := check(st); bad {
					return true, why
				}
			}
		}
		return false, ""
	}
	return check(t)
}

// marshalProjection returns encoding/json's form of v's projection (see
// TestFingerprintIntentProperty).
func marshalProjection(t *testing.T, v reflect.Value) []byte {
	raw, err := json.Marshal(project(v).Interface())
	require.NoError(t, err)
	return raw
}

// project returns a copy of the struct v with the fields the documented rules leave out set to
// zero and nil slices and maps made empty where the rules say so.
func project(v reflect.Value) reflect.Value {
	t := v.Type()
	fields := objectFields(t)
	intentMode := false
	for _, f := range fields {
		intentMode = intentMode || f.intent && !f.inExclude
	}
	out := reflect.New(t).Elem()
	for _, f := range fields {
		if f.inExclude || f.exclude {
			continue // left zero
		}
		src, dst := v, out
		reached := true
		for _, j := range f.path {
			if src.Kind() == reflect.Pointer {
				if src.IsNil() {
					reached = false
					break
				}
				src = src.Elem()
				if dst.IsNil() {
					writable(dst).Set(reflect.New(dst.Type().Elem()))
				}
				dst = dst.Elem()
			}
			src, dst = src.Field(j), dst.Field(j)
		}
		if !reached {
			continue
		}
		if f.promoted {
			// Its fields are projected one by one; a pointer to them stays set, so that they
			// stay in the JSON.
			if src.Kind() == reflect.Pointer && !src.IsNil() && dst.IsNil() {
				writable(dst).Set(reflect.New(dst.Type().Elem()))
			}
			continue
		}
		if intentMode && !f.intent && !f.inIntent {
			continue
		}
		writable(dst).Set(projectValue(src, f.keepNil))
	}
	return out
}

func projectValue(v reflect.Value, keepNil bool) reflect.Value {
	v = writable(v)
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		if v.IsNil() && !keepNil {
			if v.Kind() == reflect.Slice {
				return reflect.MakeSlice(v.Type(), 0, 0)
			}
			return reflect.MakeMap(v.Type())
		}
	case reflect.Pointer:
		if !v.IsNil() {
			p := reflect.New(v.Type().Elem())
			p.Elem().Set(projectValue(v.Elem(), keepNil))
			return p
		}
	case reflect.Struct:
		return project(v)
	}
	return v
}
