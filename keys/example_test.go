package keys_test

import (
	"fmt"

	"github.com/tempotent/tempotent/keys"
)

func ExampleDerive() {
	// What an activity sees on its first attempt, and after the workflow was reset.
	first := keys.Identity{
		Namespace: "default", Tenant: "acme", WorkflowID: "order-123",
		RunID: "run-1", OriginalRunID: "run-1", ActivityID: "5", ActivityType: "Charge", Step: "charge#1",
	}
	afterReset := first
	afterReset.RunID = "run-2" // Reset starts a new run; OriginalRunID stays

	k1, _ := keys.Derive(first, keys.Options{})
	k2, _ := keys.Derive(afterReset, keys.Options{})
	fmt.Println(k1.ID)
	fmt.Println(k1 == k2)

	r1, _ := keys.Derive(first, keys.Options{Scope: keys.ScopeRun})
	r2, _ := keys.Derive(afterReset, keys.Options{Scope: keys.ScopeRun})
	fmt.Println(r1 == r2)
	// Output:
	// wf:order-123/run-1/charge#1
	// true
	// false
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
	fmt.Println(a == b, a == c)
	// Output: true false
}
