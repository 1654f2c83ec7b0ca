package outbox_test

import (
	"encoding/json"
	"fmt"

	"github.com/tempotent/tempotent/outbox"
)

// A workflow's signal handler drops the repeats of an outbox message by its ID, and carries what
// it has seen into its next run (continue-as-new) as an argument.
func ExampleSignalDedup() {
	var seen outbox.SignalDedup // the zero value remembers outbox.SignalDedupMaxDefault IDs
	for _, s := range []outbox.Signal[string]{
		{ID: "m1", Payload: "paid"},
		{ID: "m1", Payload: "paid"}, // the dispatcher delivered m1 again
		{ID: "m2", Payload: "shipped"},
	} {
		if seen.First(s.ID) {
			fmt.Println("handle", s.Payload)
		}
	}

	// Continue-as-new: the next run gets seen as an argument, encoded as JSON.
	raw, _ := json.Marshal(seen)
	var next outbox.SignalDedup
	_ = json.Unmarshal(raw, &next)
	fmt.Println("m2 again is first:", next.First("m2"))
	// Output:
	// handle paid
	// handle shipped
	// m2 again is first: false
}
