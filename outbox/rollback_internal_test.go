package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// TestRollbackAfterTheCallersContextEnded: a delivery's statement failed and its caller's context
// ended before the rollback: the ROLLBACK is still sent, and the caller's connection is left open
// and idle, not closed.
func TestRollbackAfterTheCallersContextEnded(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), "BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(), "SELECT 1/0")
	require.Error(t, err)
	require.Equal(t, byte('E'), conn.PgConn().TxStatus())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rollback(ctx, conn)
	require.False(t, conn.IsClosed(), "the connection was closed instead of rolled back")
	require.Equal(t, byte('I'), conn.PgConn().TxStatus())
}
