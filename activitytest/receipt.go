package activitytest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// Want is what RequireReceipt checks of a receipt; a zero field is not checked.
type Want struct {
	// Status is one of operator's Status constants ("succeeded", "failed", "unknown", …).
	Status string
	// Result is compared, as JSON, with the recorded result.
	Result any
	// ErrorType is the recorded failure's type.
	ErrorType string
	// Attempts is how many attempts held the receipt.
	Attempts int
}

// Receipts is what RequireReceipt and RequireNoReceipt read a receipt through: an
// *operator.Client (NewOperator makes one on a store of NewStore). An *activity.Store still is
// one too, through its deprecated Receipt method, until that is removed.
type Receipts interface {
	Receipt(ctx context.Context, token keys.Token) (operator.Receipt, error)
}

// NewOperator returns an operator client on the receipts of s, a store that NewStore made,
// configured as s is: for the checks above, and for a test that resolves, re-arms or purges
// receipts as an operator would.
func NewOperator(tb testing.TB, s *activity.Store) *operator.Client {
	tb.Helper()
	ts := testStoreOf(tb, s)
	c := s.Config()
	op, err := operator.NewClient(ts.pool, operator.Config{Schema: ts.schema, Retention: c.Retention, DataConverter: c.DataConverter,
		Codecs: c.Codecs, MaxPayloadBytes: c.MaxPayloadBytes, LockTimeout: c.LockTimeout, StatementTimeout: c.StatementTimeout})
	if err != nil {
		tb.Fatalf("activitytest: %v", err)
	}
	return op
}

// RequireReceipt fails tb unless r holds a receipt under token (for a key, k.Token()) that is
// as want says, and returns it for further checks.
func RequireReceipt(tb testing.TB, r Receipts, token keys.Token, want Want) operator.Receipt {
	tb.Helper()
	got, err := r.Receipt(context.Background(), token)
	if err != nil {
		tb.Fatalf("activitytest: want a receipt under token %s: %v", token, err)
	}
	if want.Status != "" && got.Status != want.Status {
		tb.Errorf("activitytest: receipt %s (%s) is %s, want %s", token, got.Key.Operation, got.Status, want.Status)
	}
	if want.ErrorType != "" && got.ErrorType != want.ErrorType {
		tb.Errorf("activitytest: receipt %s (%s) records error type %q, want %q", token, got.Key.Operation, got.ErrorType, want.ErrorType)
	}
	if want.Attempts != 0 && got.Attempts != want.Attempts {
		tb.Errorf("activitytest: receipt %s (%s) was held by %d attempts, want %d", token, got.Key.Operation, got.Attempts, want.Attempts)
	}
	if want.Result != nil {
		wantJSON, err := json.Marshal(want.Result)
		if err != nil {
			tb.Fatalf("activitytest: Want.Result does not encode as JSON: %v", err)
		}
		if text := got.ResultText(); !jsonEqual(text, string(wantJSON)) {
			tb.Errorf("activitytest: receipt %s (%s) records result %s, want %s", token, got.Key.Operation, text, wantJSON)
		}
	}
	return got
}

// RequireNoReceipt fails tb if r holds a receipt under token: nothing was recorded for it (a
// rolled-back DoInTx, an activity refused before it ran).
func RequireNoReceipt(tb testing.TB, r Receipts, token keys.Token) {
	tb.Helper()
	got, err := r.Receipt(context.Background(), token)
	switch {
	case errors.Is(err, operator.ErrNoReceipt):
	case err != nil:
		tb.Fatalf("activitytest: read receipt %s: %v", token, err)
	default:
		tb.Errorf("activitytest: want no receipt under token %s, found one for %s that is %s", token, got.Key.Operation, got.Status)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
