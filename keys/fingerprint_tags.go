package keys

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// This file makes the value whose encoding/json form fingerprint version 2 hashes: a copy of the
// request with the fields its tempotent tags leave out set to their zero value, and nil slices and
// maps made empty. The copy is made lazily, only where something changes, and the caller's value
// is never written to. See FingerprintOf for what the tags mean.

// tagKey is the struct tag that chooses the fields a fingerprint covers.
const tagKey = "tempotent"

// cycleCheckDepth is how many pointers, slices and maps deep prepare goes before it starts
// recording the ones on its path, to find a value that contains itself. encoding/json starts at
// the same depth, so shallow values, which are nearly all of them, cost no bookkeeping.
const cycleCheckDepth = 1000

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// fieldOptions is a field's parsed tempotent tag.
type fieldOptions struct {
	exclude bool // "-": the fingerprint ignores the field
	intent  bool // "intent": the field is part of its object's intent
	keepNil bool // "keepnil": a nil slice or map in the field is not the same as an empty one
}

// parseTag reads the tempotent tag of field sf of struct owner. An option it does not know is an
// error, so that a misspelt "intent" does not silently leave the field out of an intent.
func parseTag(owner reflect.Type, sf reflect.StructField) (fieldOptions, error) {
	tag := sf.Tag.Get(tagKey)
	switch tag {
	case "":
		return fieldOptions{}, nil
	case "-":
		return fieldOptions{exclude: true}, nil
	}
	var o fieldOptions
	for opt := range strings.SplitSeq(tag, ",") {
		switch opt {
		case "intent":
			o.intent = true
		case "keepnil":
			o.keepNil = true
		case "-":
			return o, tagError(owner, sf, `"-" leaves the field out and takes no other option; write %s:"-" alone`, tagKey)
		default:
			return o, tagError(owner, sf, `unknown option %q; the options are "-", "intent" and "keepnil"`, opt)
		}
	}
	return o, nil
}

func tagError(owner reflect.Type, sf reflect.StructField, format string, args ...any) error {
	return fmt.Errorf("%w: field %s.%s has tag %s:%q: %s",
		ErrNotCanonicalizable, owner, sf.Name, tagKey, sf.Tag.Get(tagKey), fmt.Sprintf(format, args...))
}

// jsonField is a struct field that encoding/json encodes.
type jsonField struct {
	index int
	typ   reflect.Type
	opts  fieldOptions
	// promoted is the struct type whose fields encoding/json promotes into the enclosing object
	// (an embedded struct or struct pointer without a JSON name), or nil.
	promoted reflect.Type
}

// jsonFields lists the fields of struct t that encoding/json encodes, with their tempotent
// options, following encoding/json's rules for which fields it sees. The intent option on a field
// encoding/json does not encode is an error: the fingerprint cannot include that field.
func jsonFields(t reflect.Type) ([]jsonField, error) {
	var fields []jsonField
	for i := range t.NumField() {
		sf := t.Field(i)
		opts, err := parseTag(t, sf)
		if err != nil {
			return nil, err
		}
		jsonTag := sf.Tag.Get("json")
		jsonName, _, _ := strings.Cut(jsonTag, ",")
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		encoded := jsonTag != "-" &&
			(sf.IsExported() || sf.Anonymous && ft.Kind() == reflect.Struct)
		if !encoded {
			if opts.intent {
				return nil, tagError(t, sf, "encoding/json does not encode the field (it is unexported or tagged json:\"-\"), so the fingerprint cannot include it")
			}
			continue
		}
		f := jsonField{index: i, typ: sf.Type, opts: opts}
		if sf.Anonymous && jsonName == "" && ft.Kind() == reflect.Struct {
			f.promoted = ft
		}
		fields = append(fields, f)
	}
	return fields, nil
}

// typeInfo is what prepare needs to know about a type before it looks at a value of it.
type typeInfo struct {
	// walk says that a value of the type may differ from its prepared form: it can hold a slice,
	// a map, an interface value or a struct field with a tempotent tag.
	walk bool
	// marshalsAddressable says that *T implements json.Marshaler or encoding.TextMarshaler, which
	// encoding/json calls, instead of looking inside, when the value is addressable.
	marshalsAddressable bool
	// err is the first invalid tempotent tag among the types the type holds.
	err error
}

var typeInfos sync.Map // reflect.Type → typeInfo

// infoOf returns the typeInfo of t, computed once per type. It looks at every type t can hold,
// so a misspelt tag is reported even while the field that has it is nil.
func infoOf(t reflect.Type) typeInfo {
	if info, ok := typeInfos.Load(t); ok {
		return info.(typeInfo)
	}
	info := typeInfo{marshalsAddressable: t.Kind() != reflect.Pointer && marshals(reflect.PointerTo(t))}
	// A struct type is visited once as a JSON object of its own and once as an embedded struct
	// whose fields encoding/json promotes into another, when it is both.
	type visited struct {
		t        reflect.Type
		promoted bool
	}
	seen := make(map[visited]bool)
	var objects []reflect.Type // the struct types that are JSON objects of their own
	var visit func(t reflect.Type, promoted bool)
	visit = func(t reflect.Type, promoted bool) {
		if seen[visited{t, promoted}] || info.err != nil || marshals(t) {
			return // a type that marshals itself is a leaf: its own method decides its JSON
		}
		seen[visited{t, promoted}] = true
		if t.Kind() == reflect.Struct && !promoted {
			objects = append(objects, t)
		}
		switch t.Kind() {
		case reflect.Interface:
			info.walk = true
		case reflect.Slice, reflect.Map:
			info.walk = true
			visit(t.Elem(), false)
		case reflect.Pointer:
			visit(t.Elem(), promoted) // an embedded struct pointer
		case reflect.Array:
			visit(t.Elem(), false)
		case reflect.Struct:
			fields, err := jsonFields(t)
			if err != nil {
				info.err = err
				return
			}
			for _, f := range fields {
				info.walk = info.walk || f.opts != fieldOptions{}
				visit(f.typ, f.promoted != nil) // a promoted struct's fields belong to t's object
			}
		}
	}
	visit(t, false)
	for _, o := range objects {
		if info.err != nil {
			break
		}
		info.err = checkIntentEncoded(o)
	}
	actual, _ := typeInfos.LoadOrStore(t, info)
	return actual.(typeInfo)
}

func marshals(t reflect.Type) bool {
	return t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType)
}

// structPlan says which fields of a struct prepare may have to change, and how.
type structPlan struct {
	fields []fieldPlan
}

type fieldPlan struct {
	index int
	// exclude says the field is left out: it is tagged "-", or its object is in intent mode and
	// the field is not part of the intent. prepare sets it to its zero value.
	exclude bool
	keepNil bool
	// embedded is the plan for the fields of an embedded struct that encoding/json promotes into
	// the enclosing object. They follow that object's intent mode, not their own type's.
	embedded *structPlan
}

var structPlans sync.Map // reflect.Type → *structPlan

// planOf returns the plan for struct t as a JSON object of its own: in intent mode when any of
// its fields, or of the fields promoted into it, is tagged intent.
func planOf(t reflect.Type) (*structPlan, error) {
	if p, ok := structPlans.Load(t); ok {
		return p.(*structPlan), nil
	}
	if err := checkIntentEncoded(t); err != nil {
		return nil, err
	}
	path := []reflect.Type{t}
	p, err := buildPlan(t, hasIntent(t, path), path)
	if err != nil {
		return nil, err
	}
	actual, _ := structPlans.LoadOrStore(t, p)
	return actual.(*structPlan), nil
}

// hasIntent reports whether a field of struct t, or one promoted into it from an embedded struct
// that is not left out, is tagged intent. path holds the structs already promoted into the object
// (t last): encoding/json does not promote a struct into an object twice, so neither does this.
// It ignores tag errors, which infoOf reports.
func hasIntent(t reflect.Type, path []reflect.Type) bool {
	fields, _ := jsonFields(t)
	for _, f := range fields {
		switch {
		case f.opts.exclude:
		case f.opts.intent:
			return true
		case f.promoted != nil && !slices.Contains(path, f.promoted):
			if hasIntent(f.promoted, append(path, f.promoted)) {
				return true
			}
		}
	}
	return false
}

// buildPlan plans the fields of struct t as part of one JSON object. intentOnly says that only
// t's intent fields count: the object is in intent mode and no embedding field tagged intent
// covers t. path is as for hasIntent.
func buildPlan(t reflect.Type, intentOnly bool, path []reflect.Type) (*structPlan, error) {
	fields, err := jsonFields(t)
	if err != nil {
		return nil, err
	}
	p := &structPlan{}
	for _, f := range fields {
		fp := fieldPlan{index: f.index, keepNil: f.opts.keepNil}
		switch {
		case f.opts.exclude:
			fp.exclude = true
		case f.promoted != nil:
			if slices.Contains(path, f.promoted) {
				continue // encoding/json never reads it
			}
			sub, err := buildPlan(f.promoted, intentOnly && !f.opts.intent, append(path, f.promoted))
			if err != nil {
				return nil, err
			}
			if len(sub.fields) == 0 {
				continue
			}
			fp.embedded = sub
		case intentOnly && !f.opts.intent:
			fp.exclude = true
		case infoOf(f.typ).walk:
			// prepare looks inside
		default:
			continue // nothing in it can change
		}
		p.fields = append(p.fields, fp)
	}
	return p, nil
}

// prepareV2 returns the value whose encoding/json form fingerprint version 2 hashes, and whether
// it differs from v at all; when it does not, it is v itself.
func prepareV2(v any) (any, bool, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return v, false, nil
	}
	top := lazyCopy{src: rv}
	var p preparer
	changed, err := p.prepare(rv, false, top.get)
	if err != nil || !changed {
		return v, false, err
	}
	return top.dst.Interface(), true, nil
}

// slot returns the place in the copy where prepare writes the prepared form of the value it is
// given: a settable value that holds a copy of it. It makes the copy on first call, so nothing is
// copied where nothing changes.
type slot func() reflect.Value

// lazyCopy is a copy of src, made on the first call of get.
type lazyCopy struct{ src, dst reflect.Value }

func (c *lazyCopy) get() reflect.Value {
	if !c.dst.IsValid() {
		c.dst = reflect.New(c.src.Type()).Elem()
		c.dst.Set(unlocked(c.src))
	}
	return c.dst
}

// preparer walks a value for prepareV2. It reads the value the way encoding/json does, so that
// the copy's JSON differs from the value's only where a tag or the nil rule says so.
type preparer struct {
	depth  int              // pointers, slices and maps on the path from the top
	onPath map[ref]struct{} // those on the path, recorded beyond cycleCheckDepth
}

// ref identifies what a pointer, slice or map refers to, for finding a value that contains
// itself. A slice is told apart by its length too, as encoding/json does: a slice of itself with
// another length is not a cycle.
type ref struct {
	typ reflect.Type
	ptr unsafe.Pointer
	len int
}

// prepare writes the prepared form of v to dst when it differs from v, and reports whether it
// does. keepNil says a nil slice or map stays nil; it holds for the field's own value and through
// pointers and interfaces, not for the elements or fields inside.
func (p *preparer) prepare(v reflect.Value, keepNil bool, dst slot) (bool, error) {
	switch v.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String,
		reflect.Chan, reflect.Func, reflect.UnsafePointer:
		// Nothing inside. encoding/json refuses complex numbers, channels, funcs and unsafe
		// pointers, as in version 1.
		return false, nil
	}
	info := infoOf(v.Type())
	switch {
	case info.err != nil:
		return false, info.err
	case !info.walk, info.marshalsAddressable && v.CanAddr():
		return false, nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		return p.preparePointer(v, keepNil, dst)
	case reflect.Interface:
		return p.prepareInterface(v, keepNil, dst)
	case reflect.Slice:
		return p.prepareSlice(v, keepNil, dst)
	case reflect.Map:
		return p.prepareMap(v, keepNil, dst)
	case reflect.Array:
		return p.prepareElems(v, func(i int) slot { return func() reflect.Value { return dst().Index(i) } })
	case reflect.Struct:
		plan, err := planOf(v.Type())
		if err != nil {
			return false, err
		}
		return p.prepareFields(v, plan, dst)
	}
	return false, nil
}

func (p *preparer) preparePointer(v reflect.Value, keepNil bool, dst slot) (bool, error) {
	if v.IsNil() {
		return false, nil
	}
	leave, err := p.enter(v)
	if err != nil {
		return false, err
	}
	defer leave()
	elem := lazyCopy{src: v.Elem()}
	changed, err := p.prepare(v.Elem(), keepNil, elem.get)
	if changed {
		unlocked(dst()).Set(elem.dst.Addr())
	}
	return changed, err
}

// prepareInterface prepares the value an interface holds. It is written back whole, since the
// value inside an interface cannot be changed in place.
func (p *preparer) prepareInterface(v reflect.Value, keepNil bool, dst slot) (bool, error) {
	if v.IsNil() {
		return false, nil
	}
	elem := lazyCopy{src: v.Elem()}
	changed, err := p.prepare(v.Elem(), keepNil, elem.get)
	if changed {
		unlocked(dst()).Set(elem.dst)
	}
	return changed, err
}

func (p *preparer) prepareSlice(v reflect.Value, keepNil bool, dst slot) (bool, error) {
	if v.IsNil() {
		if keepNil {
			return false, nil
		}
		unlocked(dst()).Set(reflect.MakeSlice(v.Type(), 0, 0))
		return true, nil
	}
	if !infoOf(v.Type().Elem()).walk {
		return false, nil
	}
	leave, err := p.enter(v)
	if err != nil {
		return false, err
	}
	defer leave()
	var elems reflect.Value // the copy of the slice, made when the first element changes
	return p.prepareElems(v, func(i int) slot {
		return func() reflect.Value {
			if !elems.IsValid() {
				elems = reflect.MakeSlice(v.Type(), v.Len(), v.Len())
				reflect.Copy(elems, v)
				unlocked(dst()).Set(elems)
			}
			return elems.Index(i)
		}
	})
}

// prepareElems prepares the elements of a slice or array; elem(i) is where element i goes.
func (p *preparer) prepareElems(v reflect.Value, elem func(i int) slot) (bool, error) {
	changed := false
	for i := range v.Len() {
		c, err := p.prepare(v.Index(i), false, elem(i))
		if err != nil {
			return false, err
		}
		changed = changed || c
	}
	return changed, nil
}

func (p *preparer) prepareMap(v reflect.Value, keepNil bool, dst slot) (bool, error) {
	if v.IsNil() {
		if keepNil {
			return false, nil
		}
		unlocked(dst()).Set(reflect.MakeMap(v.Type()))
		return true, nil
	}
	if !infoOf(v.Type().Elem()).walk {
		return false, nil
	}
	leave, err := p.enter(v)
	if err != nil {
		return false, err
	}
	defer leave()
	var out reflect.Value // the copy of the map, made when the first value changes
	for iter := v.MapRange(); iter.Next(); {
		elem := lazyCopy{src: iter.Value()}
		changed, err := p.prepare(elem.src, false, elem.get)
		if err != nil {
			return false, err
		}
		if !changed {
			continue
		}
		if !out.IsValid() {
			out = reflect.MakeMapWithSize(v.Type(), v.Len())
			for all := v.MapRange(); all.Next(); {
				out.SetMapIndex(all.Key(), all.Value())
			}
			unlocked(dst()).Set(out)
		}
		out.SetMapIndex(iter.Key(), elem.dst)
	}
	return out.IsValid(), nil
}

// prepareFields applies plan to the fields of struct v, writing to the struct dst returns.
func (p *preparer) prepareFields(v reflect.Value, plan *structPlan, dst slot) (bool, error) {
	changed := false
	for _, f := range plan.fields {
		fv := v.Field(f.index)
		field := func() reflect.Value { return dst().Field(f.index) }
		var c bool
		var err error
		switch {
		case f.exclude:
			if c = !fv.IsZero(); c {
				unlocked(field()).SetZero()
			}
		case f.embedded != nil:
			c, err = p.prepareEmbedded(fv, f.embedded, field)
		default:
			c, err = p.prepare(fv, f.keepNil, field)
		}
		if err != nil {
			return false, err
		}
		changed = changed || c
	}
	return changed, nil
}

// prepareEmbedded applies plan to the fields of an embedded struct, or of the struct an embedded
// pointer points to. Embedding cannot form a cycle (buildPlan stops at a struct already promoted),
// so it needs no cycle check.
func (p *preparer) prepareEmbedded(v reflect.Value, plan *structPlan, dst slot) (bool, error) {
	if v.Kind() != reflect.Pointer {
		return p.prepareFields(v, plan, dst)
	}
	if v.IsNil() {
		return false, nil
	}
	elem := lazyCopy{src: v.Elem()}
	changed, err := p.prepareFields(v.Elem(), plan, elem.get)
	if changed {
		unlocked(dst()).Set(elem.dst.Addr())
	}
	return changed, err
}

// enter records the pointer, slice or map v on the path, once the path is deep enough to make a
// cycle likely, and refuses v when it is already on it. The caller calls leave when done with v.
func (p *preparer) enter(v reflect.Value) (leave func(), err error) {
	p.depth++
	if p.depth <= cycleCheckDepth {
		return func() { p.depth-- }, nil
	}
	r := ref{typ: v.Type(), ptr: v.UnsafePointer()}
	if v.Kind() == reflect.Slice {
		r.len = v.Len()
	}
	if _, ok := p.onPath[r]; ok {
		p.depth--
		return nil, fmt.Errorf("%w: the value contains itself (a cycle through %s)", ErrNotCanonicalizable, v.Type())
	}
	if p.onPath == nil {
		p.onPath = make(map[ref]struct{})
	}
	p.onPath[r] = struct{}{}
	return func() { delete(p.onPath, r); p.depth-- }, nil
}

// unlocked returns v without the read-only mark that reflect puts on a value reached through an
// unexported embedded field, so that it can be copied from or, in the copy prepare makes, written
// to. encoding/json reads the exported fields promoted from such a field, so prepare must be able
// to copy and change them; it writes only to its own copy, never to the caller's value. A value
// that is not addressable is returned as it is: prepare never needs to unlock one.
func unlocked(v reflect.Value) reflect.Value {
	if v.CanSet() || !v.CanAddr() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}
