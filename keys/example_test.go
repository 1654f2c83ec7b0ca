package keys_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/tempotent/tempotent/keys"
)

func ExampleExplicit() {
	// A key for code that runs receipts outside Temporal, such as a Nexus operation handler
	// keyed by its request ID.
	k, err := keys.Explicit("default", "acme", "charge", "nexus-request-7f3a")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(k.ID)
	_, err = keys.Explicit("default", "acme", "charge", "")
	fmt.Println(errors.Is(err, keys.ErrInvalidKey))
	// Output:
	// explicit:nexus-request-7f3a
	// true
}

func ExampleKey_Token() {
	k := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "order-123"}
	fmt.Println(k.Token())
	fmt.Println(k.Token().UUID())
	refund, _ := k.Compensation("Refund")
	fmt.Println(refund.Operation, refund.Token() != k.Token())
	// Output:
	// 3SfXJYT11cOIanV4x55tC17Q3paq7ucXP4sAZly3rn4
	// dd27d725-84f5-85c3-886a-7578c79e6d0b
	// Refund true
}

func ExampleFingerprintJSON() {
	a, _ := keys.FingerprintJSON([]byte(`{"amount": 100, "currency": "eur"}`))
	b, _ := keys.FingerprintJSON([]byte(`{"currency":"eur","amount":100.0}`))
	c, _ := keys.FingerprintJSON([]byte(`{"currency":"eur","amount":101}`))
	fmt.Println(a.Matches(b), a.Matches(c))
	// Output: true false
}

func ExampleFingerprintOf_tags() {
	// RequestedAt is when this attempt built the request: it changes on every retry, and the
	// charge does not depend on it. Amount does, so it is not left out.
	type charge struct {
		Order       string    `json:"order"`
		Amount      int       `json:"amount"`
		RequestedAt time.Time `json:"requested_at" tempotent:"-"`
	}
	first, _ := keys.FingerprintOf(charge{Order: "order-123", Amount: 100, RequestedAt: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)})
	retry, _ := keys.FingerprintOf(charge{Order: "order-123", Amount: 100, RequestedAt: time.Date(2026, 5, 1, 9, 5, 0, 0, time.UTC)})
	other, _ := keys.FingerprintOf(charge{Order: "order-123", Amount: 250, RequestedAt: time.Date(2026, 5, 1, 9, 5, 0, 0, time.UTC)})
	fmt.Println(retry.Matches(first), other.Matches(first))

	// A nil slice is the same request as an empty one.
	type reserve struct{ SKUs []string }
	built, _ := keys.FingerprintOf(reserve{SKUs: []string{}})
	zero, _ := keys.FingerprintOf(reserve{})
	fmt.Println(zero.Matches(built))
	// Output:
	// true false
	// true
}
