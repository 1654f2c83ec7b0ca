package keys

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// This file checks that every intent tag of a JSON object is on a field that encoding/json
// encodes in it. A promoted field can be dropped although it is exported: a shallower field of the
// same JSON name shadows it, or another field of that name at the same depth conflicts with it and
// encoding/json drops both. An intent tag on such a field would still put the object in intent
// mode, which leaves out every field that is not tagged intent, including the one encoding/json
// writes under that name: requests that differ in it, such as refunds of 100 and 400 for one
// order, would share a fingerprint. The same goes for a field that an intent tag on an embedded
// struct brings into the intent: when encoding/json drops it and writes, under its name, a field
// that the intent leaves out.

// visibleField is a field as encoding/json's typeFields records it: its JSON name, whether a json
// tag gave the name, and the index path from the object's struct type.
type visibleField struct {
	name   string
	tagged bool
	index  []int
}

// encodedFields returns the fields encoding/json considers for struct t and those it encodes,
// following encoding/json's typeFields step by step: embedded structs without a JSON name are
// explored breadth first, a struct type already explored at an earlier or the same depth is not
// explored again, the fields of a struct type embedded more than once at one depth are recorded
// twice (so that they conflict), and of the fields of one name the shallowest wins, one with a
// json name tag before one without, and two that tie are both dropped.
func encodedFields(t reflect.Type) jsonView {
	type queued struct {
		typ   reflect.Type
		index []int
	}
	var view jsonView
	view.explored = make(map[reflect.Type][]int)
	view.repeated = make(map[reflect.Type]bool)
	next := []queued{{typ: t}}
	var count, nextCount map[reflect.Type]int
	visited := make(map[reflect.Type]bool)
	for len(next) > 0 {
		current := next
		next = nil
		count, nextCount = nextCount, make(map[reflect.Type]int)
		for _, q := range current {
			if visited[q.typ] {
				continue
			}
			visited[q.typ] = true
			view.explored[q.typ] = q.index
			view.repeated[q.typ] = count[q.typ] > 1
			for i := range q.typ.NumField() {
				sf := q.typ.Field(i)
				if sf.Anonymous {
					et := sf.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !sf.IsExported() && et.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if !validJSONName(name) {
					name = ""
				}
				index := append(slices.Clone(q.index), i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					f := visibleField{name: cmp.Or(name, sf.Name), tagged: name != "", index: index}
					view.candidates = append(view.candidates, f)
					if count[q.typ] > 1 {
						view.candidates = append(view.candidates, f)
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, queued{typ: ft, index: index})
				}
			}
		}
	}
	byName := make(map[string][]visibleField)
	for _, f := range view.candidates {
		byName[f.name] = append(byName[f.name], f)
	}
	for _, fields := range byName {
		if w, ok := dominant(fields); ok {
			view.encoded = append(view.encoded, w)
		}
	}
	slices.SortFunc(view.encoded, func(a, b visibleField) int { return slices.Compare(a.index, b.index) })
	return view
}

// jsonView is what encodedFields finds out about a struct type as a JSON object.
type jsonView struct {
	candidates []visibleField // the fields encoding/json considers, before it drops any
	encoded    []visibleField // the fields it encodes, in index order
	// explored is the index of the embedding field through which encoding/json reads each struct
	// type it promotes (nil for the object's own type); it reads each type once.
	explored map[reflect.Type][]int
	// repeated says that a struct type was promoted more than once at the depth where it was
	// read, so that all its fields conflict.
	repeated map[reflect.Type]bool
}

// dominant returns the field of one JSON name that encoding/json encodes, if any (its
// dominantField): the shallowest, a tagged one before an untagged one at the same depth; when the
// first two tie, none.
func dominant(fields []visibleField) (visibleField, bool) {
	fields = slices.Clone(fields)
	slices.SortStableFunc(fields, compareDominance)
	if len(fields) > 1 && compareDominance(fields[0], fields[1]) == 0 {
		return visibleField{}, false
	}
	return fields[0], true
}

func compareDominance(a, b visibleField) int {
	if c := cmp.Compare(len(a.index), len(b.index)); c != 0 {
		return c
	}
	switch {
	case a.tagged == b.tagged:
		return 0
	case a.tagged:
		return -1
	}
	return 1
}

// validJSONName is encoding/json's isValidTag: a json tag name it does not accept is ignored, and
// the field keeps its Go name (or, embedded, is promoted).
func validJSONName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// intentOccurrence is a field tagged intent as the plan of an object reaches it: through the
// embedded structs that are promoted into the object and not left out.
type intentOccurrence struct {
	owner reflect.Type
	sf    reflect.StructField
	index []int
}

// coveredField is a field that is part of its object's intent, as the plan reaches it: tagged
// intent itself, or promoted through an embedded struct tagged intent (by, the nearest such
// embedding; nil when only the field's own tag puts it in the intent).
type coveredField struct {
	intentOccurrence
	by *intentOccurrence
}

// checkIntentEncoded refuses an intent tag, among the fields of struct t as a JSON object and
// those promoted into it, that the fingerprint cannot honour as the JSON shows it:
//
//   - A tag on a field that encoding/json does not encode in the object: a field it drops, or an
//     embedded struct none of whose promoted fields it encodes. A struct type can be promoted into
//     an object along more than one path; its tag is honoured when the field is encoded along one
//     of them.
//   - A tag on an embedded struct, at any depth, that brings into the intent a field that
//     encoding/json drops, when the field encoding/json writes under that field's JSON name (which
//     shadows it, outranks it by a json tag name, or is the copy of a struct type that it reads
//     through another embedding) is not part of the intent. The intent leaves out what the JSON
//     shows under that name: with Base tagged intent and a shallower, untagged Amount beside it,
//     refunds of 100 and 400 for one order would share a fingerprint although the user asked for
//     Base.Amount to count.
//
// A dropped field of the intent is accepted when the field written under its name is part of
// the intent too (the fingerprint covers what the JSON shows), and when encoding/json writes no
// field under that name because the fields that have it conflict at the same depth and it drops
// them all: the JSON then holds nothing there, so two requests that differ only in those fields
// are sent as the same JSON, and the activity, which reads the request from that JSON, cannot
// tell them apart either. Refusing that would refuse structs whose fingerprints are faithful to
// their JSON and already stored. A field tagged intent directly is never refused by the second
// rule: the first one requires it encoded along some path, and that copy is the one written under
// its name. Tag errors of other kinds are left to infoOf.
//
// The check follows encoding/json's rules (see encodedFields) and the documented meaning of the
// tags, independently of buildPlan, so that it also guards the plan.
func checkIntentEncoded(t reflect.Type) error {
	var tags []intentOccurrence
	var covered []coveredField
	var walk func(s reflect.Type, index []int, path []reflect.Type, by *intentOccurrence)
	walk = func(s reflect.Type, index []int, path []reflect.Type, by *intentOccurrence) {
		fields, _ := jsonFields(s)
		for _, f := range fields {
			if f.opts.exclude {
				continue // its fields are left out, and its tags do not apply
			}
			o := intentOccurrence{owner: s, sf: s.Field(f.index), index: append(slices.Clone(index), f.index)}
			if f.opts.intent {
				tags = append(tags, o)
			}
			switch {
			case f.promoted == nil:
				if f.opts.intent || by != nil {
					covered = append(covered, coveredField{o, by})
				}
			case !slices.Contains(path, f.promoted):
				sub := by
				if f.opts.intent {
					sub = &o
				}
				walk(f.promoted, o.index, append(path, f.promoted), sub)
			}
		}
	}
	walk(t, nil, []reflect.Type{t}, nil)
	if len(tags) == 0 {
		return nil
	}
	view := encodedFields(t)
	type tagged struct {
		owner reflect.Type
		field int
	}
	honoured := make(map[tagged]bool)
	for _, o := range tags {
		k := tagged{o.owner, o.sf.Index[0]}
		honoured[k] = honoured[k] || view.reachesAny(o.index)
	}
	var dropped []intentOccurrence
	for _, o := range tags {
		if !honoured[tagged{o.owner, o.sf.Index[0]}] {
			dropped = append(dropped, o)
		}
	}
	if len(dropped) == 0 {
		return view.checkCoveredWritten(t, covered)
	}
	// Explain the copy of the field that encoding/json considers, where the tag has one: the others
	// are copies it never reads, because it reads the struct that declares them elsewhere.
	o := dropped[0]
	if i := slices.IndexFunc(dropped, view.considers); i >= 0 {
		o = dropped[i]
	}
	return tagError(o.owner, o.sf, "encoding/json does not encode %s in %s: %s; move the intent tag to the field that encoding/json encodes, or give the fields different JSON names",
		fieldPath(t, o.index), t, view.whyDropped(t, o))
}

// checkCoveredWritten refuses a field of the intent that encoding/json drops in object t when the
// field it writes under that name instead is not part of the intent (see checkIntentEncoded).
func (view jsonView) checkCoveredWritten(t reflect.Type, covered []coveredField) error {
	var refused []coveredField
	var winners []visibleField
	for _, c := range covered {
		if slices.ContainsFunc(view.encoded, func(f visibleField) bool { return slices.Equal(f.index, c.index) }) {
			continue
		}
		name := jsonNameOf(c.sf)
		i := slices.IndexFunc(view.encoded, func(f visibleField) bool { return f.name == name })
		if i < 0 {
			continue // the fields of that name conflict, and the JSON holds none of them
		}
		if w := view.encoded[i]; !inIntent(t, w.index) {
			refused = append(refused, c)
			winners = append(winners, w)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	// Explain a copy of the field that encoding/json considers, where there is one.
	i := max(0, slices.IndexFunc(refused, func(c coveredField) bool { return view.considers(c.intentOccurrence) }))
	c, w := refused[i], winners[i]
	tag := c.intentOccurrence
	if c.by != nil {
		tag = *c.by
	}
	todo := fmt.Sprintf("tag %s %s:\"intent\"", fieldPath(t, w.index), tagKey)
	if leftOut(t, w.index) {
		todo += " (and remove the \"-\" that leaves it out)"
	}
	return tagError(tag.owner, tag.sf, "it brings %s into the intent, but encoding/json does not encode that field in %s: %s; %s is not part of the intent, so requests that differ in it would share a fingerprint; %s, or give the fields different JSON names",
		fieldPath(t, c.index), t, view.whyCoveredDropped(t, c.intentOccurrence, w), fieldPath(t, w.index), todo)
}

// whyCoveredDropped says why encoding/json encodes w, and not the field o of the intent, under
// their JSON name in object t.
func (view jsonView) whyCoveredDropped(t reflect.Type, o intentOccurrence, w visibleField) string {
	if view.considers(o) {
		return fmt.Sprintf("its JSON name is %q, and %s", w.name, view.whyNameDropped(t, visibleField{name: w.name, tagged: jsonNameTagged(o.sf), index: o.index}))
	}
	// encoding/json reads a struct type on o's path through another embedding.
	for n := 1; n < len(o.index); n++ {
		ft, promoted := promotedStruct(fieldAt(t, o.index[:n]))
		if at, ok := view.explored[ft]; promoted && ok && !slices.Equal(at, o.index[:n]) {
			return fmt.Sprintf("its JSON name is %q, and encoding/json reads the fields of %s once per object, through %s, not through %s",
				w.name, ft, fieldPath(t, at), fieldPath(t, o.index[:n]))
		}
	}
	return fmt.Sprintf("its JSON name is %q, and encoding/json encodes another field under it", w.name)
}

// jsonNameTagged reports whether a json tag names the field sf, as encoding/json sees it.
func jsonNameTagged(sf reflect.StructField) bool {
	name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	return validJSONName(name)
}

// jsonNameOf returns the name under which encoding/json writes the field sf that it does not
// promote from: its json tag name when encoding/json accepts it, its Go name otherwise.
func jsonNameOf(sf reflect.StructField) string {
	if !jsonNameTagged(sf) {
		return sf.Name
	}
	name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	return name
}

// fieldAt returns the field at index in struct t, through embedded pointers.
func fieldAt(t reflect.Type, index []int) reflect.StructField {
	var sf reflect.StructField
	for _, i := range index {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		sf = t.Field(i)
		t = sf.Type
	}
	return sf
}

// inIntent reports whether the documented rules count the field at index in object t, which is
// in intent mode: it or an embedded struct on its path is tagged intent, and none is tagged "-".
func inIntent(t reflect.Type, index []int) bool {
	intent := false
	for n := 1; n <= len(index); n++ {
		opts, _ := parseTag(t, fieldAt(t, index[:n])) // tag errors are infoOf's
		if opts.exclude {
			return false
		}
		intent = intent || opts.intent
	}
	return intent
}

// leftOut reports whether the field at index in object t, or an embedded struct on its path, is
// tagged "-".
func leftOut(t reflect.Type, index []int) bool {
	for n := 1; n <= len(index); n++ {
		if opts, _ := parseTag(t, fieldAt(t, index[:n])); opts.exclude {
			return true
		}
	}
	return false
}

// considers reports whether encoding/json considers the field at o.index, before it drops any.
func (view jsonView) considers(o intentOccurrence) bool {
	if ft, promoted := promotedStruct(o.sf); promoted {
		return slices.Equal(view.explored[ft], o.index)
	}
	return slices.ContainsFunc(view.candidates, func(f visibleField) bool { return slices.Equal(f.index, o.index) })
}

// promotedStruct returns the struct type that the embedded field sf promotes into its object, by
// encoding/json's rules (which ignore a json tag name they do not accept).
func promotedStruct(sf reflect.StructField) (reflect.Type, bool) {
	ft := sf.Type
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	return ft, sf.Anonymous && ft.Kind() == reflect.Struct && !validJSONName(name)
}

// whyDropped says why encoding/json encodes nothing of the tagged field o in object t.
func (view jsonView) whyDropped(t reflect.Type, o intentOccurrence) string {
	ft, promoted := promotedStruct(o.sf)
	if !promoted {
		name, _, _ := strings.Cut(o.sf.Tag.Get("json"), ",")
		f := visibleField{name: name, tagged: validJSONName(name), index: o.index}
		if !f.tagged {
			f.name = o.sf.Name
		}
		return fmt.Sprintf("its JSON name is %q, and %s", f.name, view.whyNameDropped(t, f))
	}
	// An embedded struct whose fields encoding/json promotes. It reads every struct type that the
	// plan reaches, so explored has ft.
	at := view.explored[ft]
	switch {
	case view.repeated[ft] && len(at) == len(o.index):
		return fmt.Sprintf("it is an embedded struct, and %s is promoted into %s more than once at this depth (encoding/json reads it through %s), so encoding/json drops all its fields", ft, t, fieldPath(t, at))
	case !slices.Equal(at, o.index):
		why := fmt.Sprintf("it is an embedded struct, and encoding/json reads the fields of %s once per object, through %s, which is at the same or a shallower depth", ft, fieldPath(t, at))
		if view.reachesAny(at) {
			return why + fmt.Sprintf("; to count them, tag %s", fieldPath(t, at))
		}
		return why + ", and " + view.whyNoneOf(t, at)
	}
	return "it is an embedded struct, and " + view.whyNoneOf(t, at)
}

// reachesAny reports whether a field at or under index is encoded.
func (view jsonView) reachesAny(index []int) bool {
	return slices.ContainsFunc(view.encoded, func(f visibleField) bool {
		return len(f.index) >= len(index) && slices.Equal(f.index[:len(index)], index)
	})
}

// whyNoneOf says why encoding/json encodes none of the fields it promotes through the embedding
// field at index.
func (view jsonView) whyNoneOf(t reflect.Type, index []int) string {
	for _, c := range view.candidates {
		if len(c.index) > len(index) && slices.Equal(c.index[:len(index)], index) {
			return fmt.Sprintf("encoding/json encodes none of the fields promoted through %s (%s, for one, has the JSON name %q, and %s)",
				fieldPath(t, index), fieldPath(t, c.index), c.name, view.whyNameDropped(t, c))
		}
	}
	return fmt.Sprintf("%s promotes no field that encoding/json encodes", fieldPath(t, index))
}

// whyNameDropped says why encoding/json does not encode the field f, which the plan reaches and
// which is either among the candidates or a copy of one of its own name at the same or a
// shallower depth.
func (view jsonView) whyNameDropped(t reflect.Type, f visibleField) string {
	if i := slices.IndexFunc(view.encoded, func(w visibleField) bool { return w.name == f.name }); i >= 0 {
		w := view.encoded[i]
		if len(w.index) < len(f.index) {
			return fmt.Sprintf("the shallower field %s, which encoding/json encodes under that name, shadows it", fieldPath(t, w.index))
		}
		// At the same depth, w won only by its json tag name; f has none.
		return fmt.Sprintf("%s, at the same depth, has that name from a json tag and this field does not, so encoding/json encodes %s instead", fieldPath(t, w.index), fieldPath(t, w.index))
	}
	same := []visibleField{f}
	for _, c := range view.candidates {
		if c.name == f.name {
			same = append(same, c)
		}
	}
	slices.SortStableFunc(same, compareDominance)
	var others []string
	for _, c := range same {
		if compareDominance(c, same[0]) == 0 && !slices.Equal(c.index, f.index) && !slices.Contains(others, fieldPath(t, c.index)) {
			others = append(others, fieldPath(t, c.index))
		}
	}
	switch {
	case len(others) == 0:
		return fmt.Sprintf("the struct that declares it is promoted into %s more than once at the same depth, so encoding/json drops every copy of the field", t)
	case len(same[0].index) < len(f.index):
		return fmt.Sprintf("the shallower fields %s, which have that name too, shadow it (and conflict with each other, so encoding/json drops them all)", strings.Join(others, " and "))
	}
	return fmt.Sprintf("it is in conflict with %s, which has that name at the same depth, so encoding/json drops both", strings.Join(others, " and "))
}

// fieldPath names the field at index in struct t by its Go selector, such as
// refund.refundDetails.Amount.
func fieldPath(t reflect.Type, index []int) string {
	var b strings.Builder
	b.WriteString(t.String())
	for _, i := range index {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		sf := t.Field(i)
		b.WriteString(".")
		b.WriteString(sf.Name)
		t = sf.Type
	}
	return b.String()
}
