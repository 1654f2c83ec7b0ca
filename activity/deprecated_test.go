package activity_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
)

// TestDeprecatedSentinelsMatchTheirTypes: code written against 1.0 that matches an error kind
// with errors.Is and its sentinel still finds it, wrapped or not, for as long as the sentinels
// are kept; and no sentinel matches another kind's type.
func TestDeprecatedSentinelsMatchTheirTypes(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		sentinel error
		err      error
	}{
		{activity.ErrPayloadMismatch, &activity.MismatchError{}},
		{activity.ErrInProgress, &activity.InProgressError{}},
		{activity.ErrOutcomeUnknown, &activity.OutcomeUnknownError{}},
		{activity.ErrFencedOut, &activity.FencedOutError{}},
		{activity.ErrBeyondHorizon, &activity.HorizonError{}},
		{activity.ErrPayloadTooLarge, &activity.PayloadTooLargeError{}},
		{activity.ErrStore, &activity.StoreError{}},
		{activity.ErrReconcileFailed, &activity.ReconcileError{}},
		{activity.ErrForwardUnsettled, &activity.ForwardUnsettledError{}},
		{activity.ErrBatchUnfinished, &activity.BatchUnfinishedError{}},
		{activity.ErrCompensated, &activity.CompensatedError{}},
	}
	for i, k := range kinds {
		require.ErrorIs(t, k.err, k.sentinel, "%T", k.err)
		require.ErrorIs(t, activity.NotApplied(k.err), k.sentinel, "%T wrapped", k.err)
		for j, other := range kinds {
			if i != j {
				require.False(t, errors.Is(k.err, other.sentinel), "%T matches the sentinel of %T", k.err, other.err)
			}
		}
	}
}

// TestDeprecatedDefaultsAreTheDefaults: the deprecated …Default constants still say what
// WithDefaults applies.
func TestDeprecatedDefaultsAreTheDefaults(t *testing.T) {
	t.Parallel()
	c := new(activity.Config).WithDefaults()
	require.Equal(t, activity.SchemaDefault, c.Schema)
	require.Equal(t, activity.MaxPayloadBytesDefault, c.MaxPayloadBytes)
	require.Equal(t, activity.InProgressDelayMaxDefault, c.InProgressDelayMax)
	require.Equal(t, activity.InProgressWaitDefault, c.InProgressWait)
	require.Equal(t, activity.LockTimeoutDefault, c.LockTimeout)
	require.Equal(t, activity.StatementTimeoutDefault, c.StatementTimeout)
	require.Equal(t, activity.RetentionDefault, c.Retention)
	o := activity.Options{}.WithDefaults()
	require.Equal(t, activity.DownstreamKeyMemoryDefault, o.DownstreamKeyMemory)
	require.Equal(t, activity.DownstreamSettleTimeDefault, o.DownstreamSettleTime)
	require.Equal(t, 3*time.Hour, activity.Options{DownstreamKeyMemory: 3 * time.Hour}.WithDefaults().DownstreamKeyMemory)
	require.Greater(t, activity.Options{Batch: true}.WithDefaults().DownstreamKeyMemory, 100*365*24*time.Hour,
		"a batch's items' receipts remember it for as long as the receipts last")
}
