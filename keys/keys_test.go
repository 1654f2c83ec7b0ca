package keys_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
)

// run is the identity of an activity in a workflow run that was never reset.
var run = keys.Identity{
	Namespace:     "default",
	WorkflowID:    "order-123",
	RunID:         "run-1",
	OriginalRunID: "run-1",
	ActivityID:    "5",
	ActivityType:  "Charge",
	Step:          "charge#1",
	Tenant:        "acme",
}

func with(f func(*keys.Identity)) keys.Identity {
	id := run
	f(&id)
	return id
}

func TestDeriveAcrossRetriesResetAndContinueAsNew(t *testing.T) {
	t.Parallel()
	// What Temporal changes in each situation, as seen by the activity.
	reset := with(func(id *keys.Identity) { id.RunID = "run-2" })                                 // same OriginalRunID
	continued := with(func(id *keys.Identity) { id.RunID = "run-3"; id.OriginalRunID = "run-3" }) // CAN, Retry, Cron
	nextStep := with(func(id *keys.Identity) { id.Step = "charge#2" })

	for _, tc := range []struct {
		name        string
		scope       keys.Scope
		a, b        keys.Identity
		wantSameKey bool
	}{
		// Attempts are not part of the identity at all: a retry is the same Identity.
		{"WorkflowScopeRetry", keys.ScopeWorkflow, run, run, true},
		{"WorkflowScopeReset", keys.ScopeWorkflow, run, reset, true},
		{"WorkflowScopeContinueAsNew", keys.ScopeWorkflow, run, continued, false},
		{"WorkflowScopeNextOccurrence", keys.ScopeWorkflow, run, nextStep, false},
		{"RunScopeRetry", keys.ScopeRun, run, run, true},
		{"RunScopeReset", keys.ScopeRun, run, reset, false},
		{"RunScopeContinueAsNew", keys.ScopeRun, run, continued, false},
		{"OtherTenant", keys.ScopeWorkflow, run, with(func(id *keys.Identity) { id.Tenant = "globex" }), false},
		{"OtherNamespace", keys.ScopeWorkflow, run, with(func(id *keys.Identity) { id.Namespace = "staging" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ka, err := keys.Derive(tc.a, keys.Options{Scope: tc.scope})
			require.NoError(t, err)
			kb, err := keys.Derive(tc.b, keys.Options{Scope: tc.scope})
			require.NoError(t, err)
			if tc.wantSameKey {
				require.Equal(t, ka, kb)
				require.Equal(t, ka.Token(), kb.Token())
			} else {
				require.NotEqual(t, ka.Token(), kb.Token())
			}
		})
	}
}

func TestDeriveParts(t *testing.T) {
	t.Parallel()
	k, err := keys.Derive(run, keys.Options{})
	require.NoError(t, err)
	require.Equal(t, keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "wf:order-123/run-1/charge#1"}, k)

	k, err = keys.Derive(run, keys.Options{Scope: keys.ScopeRun, Operation: "payments.charge"})
	require.NoError(t, err)
	require.Equal(t, keys.Key{Namespace: "default", Tenant: "acme", Operation: "payments.charge", ID: "run:order-123/run-1/5"}, k)

	k, err = keys.Derive(run, keys.Options{Scope: keys.ScopeExplicit, ID: "order-123/charge"})
	require.NoError(t, err)
	require.Equal(t, "order-123/charge", k.ID)
	// An ID set in workflow code (header) wins over Options.ID.
	k, err = keys.Derive(with(func(id *keys.Identity) { id.ExplicitID = "from-workflow" }), keys.Options{Scope: keys.ScopeExplicit, ID: "order-123/charge"})
	require.NoError(t, err)
	require.Equal(t, "from-workflow", k.ID)

	long := with(func(id *keys.Identity) { id.WorkflowID = strings.Repeat("w", 5000) })
	k, err = keys.Derive(long, keys.Options{})
	require.NoError(t, err)
	require.LessOrEqual(t, len(k.ID), keys.MaxIDLen)
	require.True(t, strings.HasPrefix(k.ID, "sha256:"))
}

func TestDeriveRefusesMissingIdentity(t *testing.T) {
	t.Parallel()
	standalone := keys.Identity{Namespace: "default", ActivityID: "a-1", ActivityRunID: "ar-1", ActivityType: "Charge"}
	for _, tc := range []struct {
		name string
		id   keys.Identity
		opts keys.Options
	}{
		{"StandaloneWorkflowScope", standalone, keys.Options{}},
		{"StandaloneExplicitWithoutID", standalone, keys.Options{Scope: keys.ScopeExplicit}},
		{"StandaloneWithoutRunID", with(func(id *keys.Identity) { *id = standalone; id.ActivityRunID = "" }), keys.Options{Scope: keys.ScopeRun}},
		{"NoInterceptorHeaders", with(func(id *keys.Identity) { id.OriginalRunID, id.Step = "", "" }), keys.Options{}},
		{"LocalActivityRunScope", with(func(id *keys.Identity) { id.IsLocalActivity = true }), keys.Options{Scope: keys.ScopeRun}},
		{"UnknownScope", run, keys.Options{Scope: 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := keys.Derive(tc.id, tc.opts)
			require.ErrorIs(t, err, keys.ErrNoIdentity)
			require.Equal(t, keys.Key{}, k, "a refused derivation returned a key")
		})
	}
	// A standalone activity does have a run-scoped identity: its activity run ID.
	k, err := keys.Derive(standalone, keys.Options{Scope: keys.ScopeRun})
	require.NoError(t, err)
	require.Equal(t, "activity:a-1/ar-1", k.ID)
}

func TestValidation(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]string{
		"Empty":       "",
		"TooLong":     strings.Repeat("x", keys.MaxIDLen+1),
		"NUL":         "a\x00b",
		"Control":     "a\nb",
		"C1Control":   "a\u0085b",
		"InvalidUTF8": "a\xc3\x28b",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.ErrorIs(t, keys.ValidateID(v), keys.ErrInvalidKey)
			_, err := keys.Derive(run, keys.Options{Scope: keys.ScopeExplicit, ID: v})
			if v == "" {
				require.ErrorIs(t, err, keys.ErrNoIdentity)
			} else {
				require.ErrorIs(t, err, keys.ErrInvalidKey)
			}
			if v != "" {
				require.ErrorIs(t, keys.ValidateTenant(v), keys.ErrInvalidKey)
				_, err = keys.Derive(with(func(id *keys.Identity) { id.Tenant = v }), keys.Options{})
				require.ErrorIs(t, err, keys.ErrInvalidKey)
			}
		})
	}
	require.NoError(t, keys.ValidateTenant(""), "the empty tenant means no tenant")
	require.ErrorIs(t, keys.ValidateTenant(strings.Repeat("t", keys.MaxNameLen+1)), keys.ErrInvalidKey)
	require.NoError(t, keys.ValidateID("order-123/charge · ünïcode ✓"))
	var keyErr *keys.InvalidKeyError
	require.ErrorAs(t, keys.Key{Namespace: "default", Operation: "Charge", ID: "x\x00"}.Validate(), &keyErr)
	require.Equal(t, "id", keyErr.Part)
	require.Contains(t, keyErr.Error(), "control character")
}

func TestToken(t *testing.T) {
	t.Parallel()
	k := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "order-123"}
	tok := k.Token()
	require.Len(t, tok.String(), keys.TokenLen)
	require.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9_-]+$`), tok.String())
	require.Equal(t, tok, k.Token(), "tokens are deterministic")
	// A token pinned by value: changing the derivation would give every in-flight intent a
	// new idempotency key at the provider, so it must be a deliberate, visible change.
	require.Equal(t, keys.Token("3SfXJYT11cOIanV4x55tC17Q3paq7ucXP4sAZly3rn4"), tok)

	// Length-prefixed parts: moving a separator between parts changes the token.
	shifted := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge/order", ID: "123"}
	require.NotEqual(t, tok, shifted.Token())
	require.NotContains(t, tok.String(), "order", "the token leaks the workflow ID")

	u := tok.UUID()
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), u)
	require.Equal(t, u, k.Token().UUID())
	require.NotEqual(t, u, shifted.Token().UUID())
}

func TestCompensation(t *testing.T) {
	t.Parallel()
	fwd := keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: "wf:order-123/run-1/charge#1"}
	refund, err := fwd.Compensation("Refund")
	require.NoError(t, err)
	again, err := fwd.Compensation("Refund")
	require.NoError(t, err)
	require.Equal(t, refund, again, "compensation keys must be identical on every replay")
	require.NotEqual(t, fwd.Token(), refund.Token())
	require.Equal(t, fwd.Tenant, refund.Tenant)

	notify, err := fwd.Compensation("NotifyCustomer")
	require.NoError(t, err)
	require.NotEqual(t, refund.Token(), notify.Token())

	second := fwd
	second.ID = "wf:order-123/run-1/charge#2"
	refund2, err := second.Compensation("Refund")
	require.NoError(t, err)
	require.NotEqual(t, refund.Token(), refund2.Token(), "two occurrences share a compensation key")

	_, err = fwd.Compensation("bad\x00name")
	require.ErrorIs(t, err, keys.ErrInvalidKey)
	_, err = keys.Key{}.Compensation("Refund")
	require.ErrorIs(t, err, keys.ErrInvalidKey)
}

func TestDerivePinnedKeyWinsOverScope(t *testing.T) {
	t.Parallel()
	pinned := with(func(id *keys.Identity) { id.PinnedOperation, id.PinnedID = "charge", "wf:order-123/run-1/charge#1" })
	for _, scope := range []keys.Scope{keys.ScopeWorkflow, keys.ScopeRun, keys.ScopeExplicit} {
		k, err := keys.Derive(pinned, keys.Options{Scope: scope, Operation: "ignored"})
		require.NoError(t, err)
		require.Equal(t, keys.Key{Namespace: "default", Tenant: "acme", Operation: "charge", ID: "wf:order-123/run-1/charge#1"}, k)
	}
	_, err := keys.Derive(with(func(id *keys.Identity) { id.PinnedOperation, id.PinnedID = "charge", "x\x00" }), keys.Options{})
	require.ErrorIs(t, err, keys.ErrInvalidKey)
}
