// The webhook_tallies table (migration 010) as both of its users read it: package webhook, whose
// handlers add their counts to it, and package operator, which reads and purges them.

package schema

import "github.com/jackc/pgx/v5"

// Outcomes of a webhook delivery, as the outcome column of webhook_tallies stores them.
const (
	TallyAccepted  = "accepted"
	TallyDuplicate = "duplicate"
	TallyRefused   = "refused"
	TallyFailed    = "failed"
)

// WebhookTalliesTable is the webhook_tallies table of schema, quoted for SQL.
func WebhookTalliesTable(schema string) string {
	return pgx.Identifier{schema, "webhook_tallies"}.Sanitize()
}
