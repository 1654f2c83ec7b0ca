package migrate_test

import (
	"fmt"
	"strings"

	"github.com/tempotent/tempotent/migrate"
)

// The workers connect as a role that may only read and write tempotent's rows: the schema's
// owner migrates, then applies what Grants returns (tempotent migrate --print-grants prints it).
// Here, the grants it gives, without the comments and the revocations that come first.
func ExampleGrants() {
	sql, err := migrate.Grants("", "tempotent_app")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(sql) {
		if strings.HasPrefix(line, "GRANT ") {
			fmt.Print(line)
		}
	}

	_, err = migrate.Grants("", "public")
	fmt.Println(err)
	// Output:
	// GRANT USAGE ON SCHEMA "tempotent" TO "tempotent_app";
	// GRANT SELECT ON TABLE "tempotent"."tempotent_migration" TO "tempotent_app";
	// GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "tempotent"."receipts" TO "tempotent_app";
	// GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "tempotent"."outbox" TO "tempotent_app";
	// GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "tempotent"."inbox" TO "tempotent_app";
	// GRANT SELECT, INSERT, UPDATE ON TABLE "tempotent"."inbox_versions" TO "tempotent_app";
	// GRANT SELECT, INSERT ON TABLE "tempotent"."webhook_endpoints" TO "tempotent_app";
	// GRANT SELECT, INSERT ON TABLE "tempotent"."audit" TO "tempotent_app";
	// GRANT SELECT, INSERT, UPDATE ON TABLE "tempotent"."maintenance_runs" TO "tempotent_app";
	// GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "tempotent"."webhook_tallies" TO "tempotent_app";
	// GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "tempotent"."tenant_fences" TO "tempotent_app";
	// GRANT EXECUTE ON FUNCTION "tempotent"."tenant_moved"(text, text) TO "tempotent_app";
	// GRANT EXECUTE ON FUNCTION "tempotent"."tenant_fences_read_committed"() TO "tempotent_app";
	// migrate.Grants: role name "public" is PUBLIC, every role: create a role of its own for the workers (CREATE ROLE tempotent_app LOGIN)
}
