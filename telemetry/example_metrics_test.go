package telemetry_test

import (
	"fmt"
	"strings"

	"github.com/tempotent/tempotent/telemetry"
)

// An alert rule's test checks that the metrics it names exist.
func ExampleMetrics() {
	for _, name := range telemetry.Metrics() {
		if strings.HasPrefix(name, "tempotent_receipt_") {
			fmt.Println(name)
		}
	}
	// Output:
	// tempotent_receipt_reserved
	// tempotent_receipt_replayed
	// tempotent_receipt_mismatched
	// tempotent_receipt_in_progress
	// tempotent_receipt_taken_over
	// tempotent_receipt_fenced_out
}
