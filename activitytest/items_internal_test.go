package activitytest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTally(t *testing.T) {
	t.Parallel()
	batch := &counter{items: func() map[string]int { return nil }, want: []string{"a", "b", "c"}}
	for _, c := range []struct {
		name    string
		d       counts
		n, sum  int
		note    string
		counter *counter
	}{
		{name: "EachItemOnce", d: counts{"a": 1, "b": 1, "c": 1}, n: 1, sum: 3},
		{name: "AnItemTwice", d: counts{"a": 1, "b": 2, "c": 1}, n: 2, sum: 4, note: ` [per item, want each item once: item "b" had 2]`},
		{name: "AnItemMissed", d: counts{"a": 1, "b": 1}, n: 0, sum: 2, note: ` [per item, want each item once: item "c" had none]`},
		{name: "TwiceBeatsMissed", d: counts{"a": 3, "b": 1}, n: 3, sum: 4, note: ` [per item, want each item once: item "a" had 3; item "c" had none]`},
		{name: "AnItemTheInputDoesNotHave", d: counts{"a": 1, "b": 1, "c": 1, "z": 1}, n: 2, sum: 4, note: ` [per item, want each item once: item "z", which Items does not name for the input, had 1]`},
		{name: "NoItemHadAny", d: counts{}, n: 0, sum: 0, note: ` [per item, want each item once: item "a" had none; item "b" had none; item "c" had none]`},
		{name: "NotABatch", d: counts{"": 2}, n: 2, sum: 2, counter: &counter{total: func() int { return 0 }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := batch
			if c.counter != nil {
				fx = c.counter
			}
			got := fx.tally(c.d)
			require.Equal(t, tally{n: c.n, sum: c.sum, note: c.note}, got)
		})
	}
}
