package activitytest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/keys"
)

// A batch activity as a user might write it, broken in one way: how each item is named, keyed
// and chosen.
type batchShape struct {
	items     func(ctx context.Context) []string // the items ForEach runs
	operation func(ctx context.Context) string   // Items.Operation
	key       func(ctx context.Context, item string) string
	after     func(ctx context.Context, url string) error // run after ForEach: an effect outside it
}

func tokenKey(ctx context.Context, _ string) string {
	tok, _ := keys.TokenFrom(ctx)
	return tok.String()
}

// shapedBatch is batchCharge built from shape's parts; nil parts are batchCharge's.
func shapedBatch(store *activity.Store, shape batchShape) func(url string) func(context.Context, chargeRequest) (charge, error) {
	return func(url string) func(context.Context, chargeRequest) (charge, error) {
		return func(ctx context.Context, in chargeRequest) (charge, error) {
			items, op, key := batchItems, "Transfer", tokenKey
			if shape.items != nil {
				items = shape.items(ctx)
			}
			if shape.operation != nil {
				op = shape.operation(ctx)
			}
			if shape.key != nil {
				key = shape.key
			}
			results, err := activity.ForEach(ctx, store, items, activity.Items[string]{
				ID: func(item string) string { return item }, Operation: op,
				Options: activity.Options{DownstreamDeduplicates: true},
			}, func(ctx context.Context, item string) (charge, error) {
				return postBody(ctx, url+itemPath(item), key(ctx, item), in)
			})
			if err != nil {
				return charge{}, err
			}
			if shape.after != nil {
				if err := shape.after(ctx, url); err != nil {
					return charge{}, err
				}
			}
			return charge{ID: results[0].Out.ID}, nil
		}
	}
}

// batchCases are batch activities the per-item check must pass or fail, and what it must say.
var batchCases = []struct {
	name  string
	shape batchShape
	want  []string // nil: passes
	not   []string // what the failure must not say (items that were paid once)
}{
	{name: "EachItemUnderItsToken"},
	// Names the pass by the attempt: the retry finds no item receipt and pays everyone again.
	{name: "PassNamedByTheAttempt",
		shape: batchShape{operation: func(ctx context.Context) string {
			return fmt.Sprintf("Transfer-%d", sdkactivity.GetInfo(ctx).Attempt)
		}},
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1", `item "a" had 2`, `item "c" had 2`}},
	// One item sent under a key of its own per attempt: only that item is paid twice.
	{name: "OneItemUnderARandomKey",
		shape: batchShape{key: func(ctx context.Context, item string) string {
			if item == "b" {
				return randomHexKey()
			}
			return tokenKey(ctx, item)
		}},
		want: []string{activitytest.PathFailAfterEffect + " (500 after the effect): 2 effects for one intent, want 1", `item "b" had 2`},
		not:  []string{`item "a" had`, `item "c" had`}},
	// Each item's key a random one remembered in memory under the item's token: the same on
	// every attempt in this process, a new one on the worker that takes an item over after a
	// crash.
	{name: "ItemKeyRememberedInMemory",
		shape: batchShape{key: rememberedItemKey()},
		want: []string{activitytest.PathCrashAfterEffect + ": 2 effects for one intent, want 1", `item "a" had 2`, `item "b" had 2`, `item "c" had 2`,
			activitytest.PathNewRun + ": 2 effects for one intent, want 1"}},
	// An item paid again after the batch, outside ForEach: twice on every call.
	{name: "ItemPaidAgainOutsideForEach",
		shape: batchShape{after: func(ctx context.Context, url string) error {
			tok, _ := keys.TokenFrom(ctx)
			_, err := postBody(ctx, url+itemPath("c"), tok.String()+"/bonus", nil)
			return err
		}},
		want: []string{activitytest.PathCrashBeforeReport + ": the first attempt of the batch did not have one effect per item", `item "c" had 2`},
		not:  []string{`item "a" had`, `item "b" had`}},
	// An item left out of the batch: never paid.
	{name: "SkipsAnItem",
		shape: batchShape{items: func(context.Context) []string { return batchItems[:2] }},
		want:  []string{activitytest.PathCrashBeforeReport + ": the first attempt of the batch did not have one effect per item", `item "c" had none`, "skipped"},
		not:   []string{`item "a" had`}},
}

// rememberedItemKey returns a key function that remembers a random key per item token.
func rememberedItemKey() func(context.Context, string) string {
	var (
		mu         sync.Mutex
		remembered = map[string]string{}
	)
	return func(ctx context.Context, item string) string {
		mu.Lock()
		defer mu.Unlock()
		tok := tokenKey(ctx, item)
		if remembered[tok] == "" {
			remembered[tok] = randomHexKey()
		}
		return remembered[tok]
	}
}

func randomHexKey() string { var b [8]byte; _, _ = rand.Read(b[:]); return hex.EncodeToString(b[:]) }

func TestRequireRetrySafeBatch(t *testing.T) {
	t.Parallel()
	for _, c := range batchCases {
		t.Run(verdictName(c.name, c.want), func(t *testing.T) {
			t.Parallel()
			d := activitytest.NewDownstream(t, &activitytest.DownstreamOptions{Deduplicates: true})
			store := activitytest.NewStore(t, nil)
			check := activitytest.Check[chargeRequest, charge]{
				Activity: shapedBatch(store, c.shape)(d.URL), Options: activity.Options{Batch: true},
				Input: chargeRequest{Order: "order-1", Amount: 100}, Other: chargeRequest{Order: "order-1", Amount: 999},
				Items:       func(chargeRequest) []string { return batchItems },
				ItemEffects: func() map[string]int { return d.EffectsPer(itemPath("")) },
				Faults:      d, Store: store,
			}
			requireVerdict(t, failures(t, func(tb testing.TB) { activitytest.RequireRetrySafe(tb, check) }), c.want, c.not)
		})
	}

	t.Run("RefusesItemsWithoutItemEffects", func(t *testing.T) {
		t.Parallel()
		d := activitytest.NewDownstream(t, nil)
		got := failures(t, func(tb testing.TB) {
			activitytest.RequireRetrySafe(tb, activitytest.Check[chargeRequest, charge]{
				Activity: safeCharge(d.URL), Input: chargeRequest{Amount: 1}, Other: chargeRequest{Amount: 2},
				Items: func(chargeRequest) []string { return batchItems }, Faults: d,
			})
		})
		require.Len(t, got, 1)
		require.Contains(t, got[0], "Check.Items and Check.ItemEffects go together")
	})
}
