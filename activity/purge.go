package activity

import (
	"context"
	"fmt"
)

// Purge deletes up to limit receipts whose retention has ended (PurgeBatchDefault when limit is
// not positive) and returns how many it deleted. A pending receipt is deleted only after its
// lease has ended as well, so a running attempt never loses its receipt. Call it periodically,
// repeating while it returns limit; each call is one short statement, so it never holds many
// locks or a long transaction.
func (s *Store) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		limit = PurgeBatchDefault
	}
	tag, err := s.db.Exec(ctx, s.sql.purge, limit)
	if err != nil {
		return 0, fmt.Errorf("purge receipts: %w", err)
	}
	return tag.RowsAffected(), nil
}
