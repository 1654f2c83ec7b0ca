package activity_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/temporaltest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
)

func TestMalformedKeysAreRefusedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	valid := call(t, "order-1", map[string]int{"amount": 1}).Key
	bad := map[string]string{
		"Empty":       "",
		"TooLong":     strings.Repeat("x", keys.MaxKeyIDLen+1),
		"NUL":         "order\x001",
		"Control":     "order\x1b[31m1",
		"InvalidUTF8": "order\xff1",
	}
	for name, v := range bad {
		for _, part := range []string{"ID", "Tenant", "Operation"} {
			t.Run(name+part, func(t *testing.T) {
				c := call(t, "x", map[string]int{"amount": 1})
				c.Key = valid
				switch part {
				case "ID":
					c.Key.ID = v
				case "Tenant":
					if v == "" {
						t.Skip("the empty tenant means no tenant")
					}
					c.Key.Tenant = v
				case "Operation":
					c.Key.Operation = v
				}
				_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
					t.Error("called with a malformed key")
					return 0, nil
				})
				require.ErrorIs(t, err, keys.ErrInvalidKey)
				var keyErr *keys.InvalidKeyError
				require.ErrorAs(t, err, &keyErr)
				require.Equal(t, strings.ToLower(part), keyErr.Part)
				temporaltest.RequireAppError(t, err, activity.ErrTypeInvalidKey, false)
			})
		}
	}
	require.Equal(t, 0, countReceipts(t, schema))
}

func TestTenantsDoNotShareReceipts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, nil)
	a := call(t, "order-1/charge", map[string]int{"amount": 1})
	a.Key.Tenant = "tenant-a"
	b := a
	b.Key.Tenant = "tenant-b"
	require.NotEqual(t, a.Key.Token(), b.Key.Token())

	outA, err := activity.Do(ctx, s, a, func(context.Context) (string, error) { return "result of A", nil })
	require.NoError(t, err)
	outB, err := activity.Do(ctx, s, b, func(context.Context) (string, error) { return "result of B", nil })
	require.NoError(t, err)
	require.Equal(t, "result of A", outA)
	require.Equal(t, "result of B", outB, "tenant B was given tenant A's result")
	require.Equal(t, 2, countReceipts(t, schema))
}

func TestReplayHorizonGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{Retention: 24 * time.Hour})
	c := call(t, "order-1/charge", map[string]int{"amount": 1})
	c.ScheduledAt = time.Now().Add(-25 * time.Hour)
	_, err := activity.Do(ctx, s, c, func(context.Context) (int, error) {
		t.Error("an activity scheduled before the retention ran")
		return 0, nil
	})
	var horizon *activity.HorizonError
	require.ErrorAs(t, err, &horizon)
	temporaltest.RequireAppError(t, err, activity.ErrTypeBeyondHorizon, false)
	require.Equal(t, 0, countReceipts(t, schema))

	c.ScheduledAt = time.Now().Add(-23 * time.Hour)
	_, err = activity.Do(ctx, s, c, func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
}

func TestOversizedResultIsRefusedAndNothingHalfStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := setup(t, &activity.Config{MaxPayloadBytes: 1024})
	c := call(t, "order-1/export", map[string]int{"rows": 1})
	var calls int
	fn := func(context.Context) (string, error) {
		calls++
		return strings.Repeat("x", 4096), nil
	}
	for range 2 {
		_, err := activity.Do(ctx, s, c, fn)
		require.ErrorAs(t, err, new(*activity.PayloadTooLargeError))
		temporaltest.RequireAppError(t, err, activity.ErrTypePayloadTooLarge, false)
	}
	require.Equal(t, 1, calls)
	var state string
	var result []byte
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT state, result FROM "+schema+".receipts").Scan(&state, &result))
	require.Equal(t, operator.StateFailed, state)
	require.Nil(t, result)
}

// A result of exactly Config.MaxPayloadBytes is stored; one byte more is refused.
func TestResultAtTheLimitIsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	result := strings.Repeat("x", 1000)
	p, err := converter.GetDefaultDataConverter().ToPayload(result)
	require.NoError(t, err)
	size := proto.Size(p)
	s, _ := setup(t, &activity.Config{MaxPayloadBytes: size})
	got, err := activity.Do(ctx, s, call(t, "order-1/export", 1), func(context.Context) (string, error) { return result, nil })
	require.NoError(t, err)
	require.Equal(t, result, got)
	_, err = activity.Do(ctx, s, call(t, "order-2/export", 1), func(context.Context) (string, error) { return result + "x", nil })
	require.ErrorAs(t, err, new(*activity.PayloadTooLargeError))
}

func TestUnmigratedStoreSaysWhatToDo(t *testing.T) {
	t.Parallel()
	s, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	_, err = activity.Do(context.Background(), s, call(t, "order-1", 1), func(context.Context) (int, error) { return 1, nil })
	require.ErrorAs(t, err, new(*activity.StoreError))
	require.ErrorContains(t, err, "Migrate")
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	s, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: schema})
	require.NoError(t, err)
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- s.Migrate(context.Background()) }()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	require.NoError(t, s.Migrate(context.Background()))
	var versions int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".tempotent_migration").Scan(&versions))
	migrations, err := migrate.List(schema)
	require.NoError(t, err)
	require.Equal(t, len(migrations), versions)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := activity.NewStore(nil, nil)
	require.ErrorContains(t, err, "pgxpool")
	_, err = activity.NewStore(pgtest.Pool(t), &activity.Config{Retention: time.Second})
	require.ErrorContains(t, err, "Config.Retention")
	_, err = activity.NewStore(pgtest.Pool(t), &activity.Config{MaxPayloadBytes: -1})
	require.ErrorContains(t, err, "Config.MaxPayloadBytes")
}
