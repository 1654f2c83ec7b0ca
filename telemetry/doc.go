// Package telemetry names every metric, span and tag that tempotent emits, in one place, so that
// dashboards, alerts and their tests can refer to them by name instead of copying strings.
//
// Receipts (the activity package) count through the running activity's Temporal metrics handler,
// tagged with MetricTagOperation, and trace each receipt step as a span on Config.Tracer; the
// outbox dispatcher, the inbox and the webhook handler count through the handler their Config
// gives. Metrics lists every metric name:
//
//	for _, name := range telemetry.Metrics() {
//		fmt.Println(name) // tempotent_receipt_reserved, …
//	}
//
// The names are part of the toolkit's contract: a rename is a breaking change and is listed in
// the CHANGELOG.
package telemetry
