package activity

import (
	"cmp"

	"github.com/tempotent/tempotent/migrate"
)

// Migration is one numbered schema change, rendered for a schema.
//
// Deprecated: use migrate.Migration; removed in the release after next.
type Migration = migrate.Migration

// Migrations returns every migration of tempotent's schema in version order, with SQL rendered
// for schema ("" means SchemaDefault).
//
// Deprecated: use migrate.List; removed in the release after next.
func Migrations(schemaName string) ([]Migration, error) {
	return migrate.List(cmp.Or(schemaName, SchemaDefault))
}

// ErrNotMigrated is matched by Check's error when the store's schema lacks migrations.
//
// Deprecated: use migrate.ErrNotMigrated, the same error; removed in the release after next.
var ErrNotMigrated = migrate.ErrNotMigrated
