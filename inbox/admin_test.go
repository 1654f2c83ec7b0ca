package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
)

// TestConsumersAndRecords: Consumers counts each consumer's records, its oldest and newest, and
// those within the window; Records lists one consumer's newest first, bounded.
func TestConsumersAndRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, name := setup(t, inbox.Config{Consumer: "shipping"})
	other, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "webhook/stripe", Schema: name})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		_, err := ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, ship(name, id))
		require.NoError(t, err)
	}
	_, err = other.Process(ctx, inbox.Message{ID: "evt_1"}, ship(name, "evt_1"))
	require.NoError(t, err)
	// a was processed two days ago, b an hour ago.
	_, err = pgtest.Pool(t).Exec(ctx, `UPDATE `+name+`.inbox SET processed_at = now() - CASE message_id
		WHEN 'a' THEN interval '2 days' WHEN 'b' THEN interval '1 hour' ELSE interval '0' END`)
	require.NoError(t, err)

	stats, err := inbox.Consumers(ctx, pgtest.Pool(t), name, 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	require.Equal(t, "shipping", stats[0].Consumer)
	require.Equal(t, int64(3), stats[0].Records)
	require.Equal(t, int64(2), stats[0].Recent, "the record of two days ago was counted in the last 24h")
	require.Greater(t, stats[0].Newest.Sub(stats[0].Oldest), 47*time.Hour)
	require.Equal(t, inbox.ConsumerStats{Consumer: "webhook/stripe", Records: 1, Recent: 1,
		Oldest: stats[1].Oldest, Newest: stats[1].Oldest}, stats[1])
	none, err := inbox.Consumers(ctx, pgtest.Pool(t), name, 0)
	require.NoError(t, err)
	require.Zero(t, none[0].Recent)

	recs, err := ib.Records(ctx, 2)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, []string{"c", "b"}, []string{recs[0].MessageID, recs[1].MessageID})
	require.True(t, recs[0].Checked)
	recs, err = other.Records(ctx, 0)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.False(t, recs[0].Checked)
	recs, err = ib.Records(ctx, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	recs, err = ib.Records(ctx, inbox.RecordsLimitMax)
	require.NoError(t, err, "the largest limit allowed was refused")
	require.Len(t, recs, 3)
	for _, limit := range []int{-1, inbox.RecordsLimitMax + 1} {
		_, err = ib.Records(ctx, limit)
		require.ErrorContains(t, err, "limit", "limit %d was taken", limit)
	}
}
