package activitytest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// Want is what RequireReceipt checks of a receipt; a zero field is not checked.
type Want struct {
	// Status is one of activity's Status constants ("succeeded", "failed", "unknown", …).
	Status string
	// Result is compared, as JSON, with the recorded result.
	Result any
	// ErrorType is the recorded failure's type.
	ErrorType string
	// Attempts is how many attempts held the receipt.
	Attempts int
}

// RequireReceipt fails tb unless s holds a receipt under token (for a key, k.Token()) that is
// as want says, and returns it for further checks.
func RequireReceipt(tb testing.TB, s *activity.Store, token keys.Token, want Want) activity.Receipt {
	tb.Helper()
	r, err := s.Receipt(context.Background(), token)
	if err != nil {
		tb.Fatalf("activitytest: want a receipt under token %s: %v", token, err)
	}
	if want.Status != "" && r.Status != want.Status {
		tb.Errorf("activitytest: receipt %s (%s) is %s, want %s", token, r.Key.Operation, r.Status, want.Status)
	}
	if want.ErrorType != "" && r.ErrorType != want.ErrorType {
		tb.Errorf("activitytest: receipt %s (%s) records error type %q, want %q", token, r.Key.Operation, r.ErrorType, want.ErrorType)
	}
	if want.Attempts != 0 && r.Attempts != want.Attempts {
		tb.Errorf("activitytest: receipt %s (%s) was held by %d attempts, want %d", token, r.Key.Operation, r.Attempts, want.Attempts)
	}
	if want.Result != nil {
		wantJSON, err := json.Marshal(want.Result)
		if err != nil {
			tb.Fatalf("activitytest: Want.Result does not encode as JSON: %v", err)
		}
		if got := r.ResultText(); !jsonEqual(got, string(wantJSON)) {
			tb.Errorf("activitytest: receipt %s (%s) records result %s, want %s", token, r.Key.Operation, got, wantJSON)
		}
	}
	return r
}

// RequireNoReceipt fails tb if s holds a receipt under token: nothing was recorded for it (a
// rolled-back DoInTx, an activity refused before it ran).
func RequireNoReceipt(tb testing.TB, s *activity.Store, token keys.Token) {
	tb.Helper()
	r, err := s.Receipt(context.Background(), token)
	switch {
	case errors.Is(err, activity.ErrNoReceipt):
	case err != nil:
		tb.Fatalf("activitytest: read receipt %s: %v", token, err)
	default:
		tb.Errorf("activitytest: want no receipt under token %s, found one for %s that is %s", token, r.Key.Operation, r.Status)
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
