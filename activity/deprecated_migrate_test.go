package activity_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/migrate"
)

// The deprecated names keep working until they are removed: the same migrations, with "" as
// activity.SchemaDefault, and the same error.
func TestDeprecatedMigrateNames(t *testing.T) {
	t.Parallel()
	old, err := activity.Migrations("")
	require.NoError(t, err)
	want, err := migrate.List(activity.SchemaDefault)
	require.NoError(t, err)
	require.Equal(t, want, old)
	require.ErrorIs(t, migrate.ErrNotMigrated, activity.ErrNotMigrated)
}
