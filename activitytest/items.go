package activitytest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tempotent/tempotent/keys"
)

// counter counts a check's effects: in all (Check.Effects), or per item of a batch
// (Check.ItemEffects), so that every path can ask whether each intent — or each item of a batch
// intent — had exactly one effect.
type counter struct {
	total func() int
	items func() map[string]int // nil unless the check is a batch's
	want  []string              // the batch's item IDs, in the input's order, each once
	field string                // how failures name what counts: "Check.Effects", "Check.ItemEffects"
}

// newCounter returns the counter of a check's fields, or fails tb with the field that is missing.
// A batch is declared by items (the IDs of input's items) and itemEffects together.
func newCounter[In any](tb testing.TB, check string, effects func() int, items func(In) []string, itemEffects func() map[string]int, input In) *counter {
	tb.Helper()
	switch {
	case items == nil && itemEffects == nil && effects == nil:
		tb.Fatalf("activitytest: %s.Effects is required (a counter of the activity's effects), or for a batch (activity.ForEach) %s.Items and %s.ItemEffects", check, check, check)
	case items == nil && itemEffects == nil:
		return &counter{total: effects, field: check + ".Effects"}
	case items == nil || itemEffects == nil:
		tb.Fatalf("activitytest: %s.Items and %s.ItemEffects go together: Items names the batch's items (the IDs activity.Items.ID gives them), ItemEffects counts each item's effects", check, check)
	}
	var want []string
	for _, id := range items(input) {
		if !slices.Contains(want, id) { // ForEach runs one ID once: a second is the same intent
			want = append(want, id)
		}
	}
	if len(want) == 0 {
		tb.Fatalf("activitytest: %s.Items returned no item for %s.Input: give an input with items, so that each item's effect can be counted", check, check)
	}
	return &counter{items: itemEffects, want: want, field: check + ".ItemEffects"}
}

// counts are effects so far, by item ID; the key "" holds an activity's effects in all.
type counts map[string]int

func (c *counter) now() counts {
	if c.items == nil {
		return counts{"": c.total()}
	}
	return maps.Clone(c.items())
}

// since returns the effects counted after before, by item; only items with some.
func (c *counter) since(before counts) counts {
	d := counts{}
	for id, n := range c.now() {
		if n -= before[id]; n != 0 {
			d[id] = n
		}
	}
	return d
}

// plus returns d with more added, item by item.
func (d counts) plus(more counts) counts {
	out := maps.Clone(d)
	for id, n := range more {
		out[id] += n
	}
	return out
}

// tally is what an intent's effects came to, as the paths compare them.
type tally struct {
	// n is the intent's effects: for a batch, 1 when each item had exactly one; otherwise the
	// most any item had, or 0 when some item had none and none had more than one.
	n int
	// sum is every effect counted, of every item.
	sum int
	// note names the items that did not have exactly one effect, for a failure's message; empty
	// when the check is not a batch's, or each item had one.
	note string
}

// tally returns what the effects d of one intent came to.
func (c *counter) tally(d counts) tally {
	var t tally
	for _, n := range d {
		t.sum += n
	}
	if c.items == nil {
		t.n = d[""]
		return t
	}
	var off []string
	most, missed := 1, false
	for _, id := range c.want {
		switch n := d[id]; {
		case n == 0:
			missed = true
			off = append(off, fmt.Sprintf("item %q had none", id))
		case n > 1:
			most = max(most, n)
			off = append(off, fmt.Sprintf("item %q had %d", id, n))
		}
	}
	extra := slices.Sorted(maps.Keys(d))
	for _, id := range extra {
		if n := d[id]; n != 0 && !slices.Contains(c.want, id) {
			most = max(most, n, 2) // an effect of an item the input does not have
			off = append(off, fmt.Sprintf("item %q, which Items does not name for the input, had %d", id, n))
		}
	}
	switch {
	case most > 1:
		t.n = most
	case missed:
		t.n = 0
	default:
		t.n = 1
	}
	if len(off) > 0 {
		t.note = fmt.Sprintf(" [per item, want each item once: %s]", strings.Join(off, "; "))
	}
	return t
}

// firstEffects fails tb unless the first attempt of an intent had exactly one effect (each
// item one, for a batch): the paths tell a repeat from the first effect by counting.
func (c *counter) firstEffects(tb testing.TB, path string, d counts) {
	tb.Helper()
	t := c.tally(d)
	switch {
	case c.items != nil && t.n != 1:
		tb.Fatalf("activitytest: %s: the first attempt of the batch did not have one effect per item%s: an item with none was skipped by the activity (ForEach runs every item it is given) or is not counted by %s (count each item's effects under the ID Items gives it); an item with more than one was applied twice within the attempt", path, t.note, c.field)
	case t.n == 0:
		tb.Fatalf("activitytest: %s: the first attempt had 0 effects, want 1: %s does not count this activity's effect (count what the activity does: the downstream's requests applied, your fake's charges, your table's rows)", path, c.field)
	case t.n > 1:
		tb.Fatalf("activitytest: %s: one call of the activity had %d effects, want 1: the check counts one effect per intent, to tell a repeat from the first. An activity with several effects per call needs %s to count intents; a batch (activity.ForEach) declares its items with Items and ItemEffects instead, and is counted per item; or check each effect's activity on its own", path, t.n, c.field)
	}
}

// itemsInFlight puts the items of the held batch k back in the state a worker that died after
// their effects, before their receipts, leaves them (as with Items.Concurrency at least the
// items' count): pending, their leases ended, their effects possible. The takeover must then
// take every item over under the item's token — in another process, where a key kept in memory
// is gone — instead of replaying it. Only a store can do this for the check: the SDK has no
// point inside ForEach to hold an attempt at.
func (r *runner[In, Out]) itemsInFlight(path string, k keys.Key) {
	r.tb.Helper()
	ids := make([]string, 0, len(r.fx.want))
	for _, item := range r.fx.want {
		ik, err := k.Item(item)
		if err != nil {
			r.tb.Fatalf("activitytest: %s: the key of item %q: %v", path, item, err)
		}
		ids = append(ids, ik.ID)
	}
	settle := r.c.Options.WithDefaults().DownstreamSettleTime
	tag, err := r.ts.pool.Exec(context.Background(), fmt.Sprintf(`UPDATE %q.receipts
		SET state = 'pending', result = NULL, failure = NULL, error_type = NULL, error_message = NULL,
		    completed_at = NULL, effect_possible = true, lease_expires_at = now() - $4::bigint * interval '1 microsecond'
		WHERE namespace = $1 AND tenant = $2 AND id = ANY($3) AND state = 'completed'`, r.ts.schema),
		k.Namespace, k.Tenant, ids, (settle + time.Second).Microseconds())
	if err != nil || tag.RowsAffected() == 0 {
		r.tb.Fatalf("activitytest: %s: put the batch's items back in flight: %v (%d item receipts completed): Check.Items must name the IDs the activity gives activity.ForEach (Items.ID)", path, err, tag.RowsAffected())
	}
}
