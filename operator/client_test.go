package operator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/operator"
)

func TestNewClientRefusesABadConfigByField(t *testing.T) {
	t.Parallel()
	_, err := operator.NewClient(nil, operator.Config{})
	require.ErrorContains(t, err, "db is nil")

	for field, cfg := range map[string]operator.Config{
		"Schema":           {Schema: strings.Repeat("s", 64)},
		"Retention":        {Retention: time.Second},
		"MaxPayloadBytes":  {MaxPayloadBytes: -1},
		"LockTimeout":      {LockTimeout: time.Microsecond},
		"StatementTimeout": {StatementTimeout: -time.Second},
		"DataConverter":    {DataConverter: converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), receipttest.Rot13Codec{})},
	} {
		_, err := operator.NewClient(pgtest.Pool(t), cfg)
		var bad *operator.ConfigError
		require.ErrorAs(t, err, &bad, field)
		require.Equal(t, field, bad.Field)
		require.ErrorContains(t, err, "operator.Config."+field)
	}
}

func TestNewClientAppliesTheWorkersDefaults(t *testing.T) {
	t.Parallel()
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{})
	require.NoError(t, err)
	got := op.Config()
	require.Equal(t, operator.SchemaDefault, got.Schema)
	require.Equal(t, 7*24*time.Hour, got.Retention)
	require.Equal(t, operator.MaxPayloadBytesDefault, got.MaxPayloadBytes)
	require.Equal(t, operator.LockTimeoutDefault, got.LockTimeout)
	require.Equal(t, operator.StatementTimeoutDefault, got.StatementTimeout)
	require.NotNil(t, got.DataConverter)
	require.NotNil(t, got.MetricsHandler)

	// A client given the zero Config agrees with a worker given the zero activity.Config.
	worker := (&activity.Config{}).WithDefaults()
	require.Equal(t, worker.Schema, got.Schema)
	require.Equal(t, worker.Retention, got.Retention)
	require.Equal(t, worker.MaxPayloadBytes, got.MaxPayloadBytes)
	require.Equal(t, worker.LockTimeout, got.LockTimeout)
	require.Equal(t, worker.StatementTimeout, got.StatementTimeout)
}

// The states operator reports and filters by are those the activity package writes.
func TestStatesAreTheWorkersStates(t *testing.T) {
	t.Parallel()
	require.Equal(t, schema.StatePending, operator.StatePending)
	require.Equal(t, schema.StateCompleted, operator.StateCompleted)
	require.Equal(t, schema.StateFailed, operator.StateFailed)
}
