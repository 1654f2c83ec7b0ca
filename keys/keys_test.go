package keys_test

import (
	"regexp"
	"slices"
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
	require.Equal(t, "explicit:order-123/charge", k.ID)
	// An ID set in workflow code (header) wins over Options.ID.
	k, err = keys.Derive(with(func(id *keys.Identity) { id.ExplicitID = "from-workflow" }), keys.Options{Scope: keys.ScopeExplicit, ID: "order-123/charge"})
	require.NoError(t, err)
	require.Equal(t, "explicit:from-workflow", k.ID)
	// The longest explicit ID a caller may give is a valid Key.ID once tagged, and is not hashed.
	longest := strings.Repeat("x", keys.MaxIDLen)
	k, err = keys.Derive(run, keys.Options{Scope: keys.ScopeExplicit, ID: longest})
	require.NoError(t, err)
	require.Equal(t, "explicit:"+longest, k.ID)
	require.Len(t, k.ID, keys.MaxKeyIDLen)
	require.NoError(t, k.Validate())
	k.ID += "x"
	require.ErrorIs(t, k.Validate(), keys.ErrInvalidKey)

	// A derived ID is hashed only when it is longer than MaxIDLen.
	const rest = len("wf:") + len("/run-1/charge#1")
	k, err = keys.Derive(with(func(id *keys.Identity) { id.WorkflowID = strings.Repeat("w", keys.MaxIDLen-rest) }), keys.Options{})
	require.NoError(t, err)
	require.Equal(t, "wf:"+strings.Repeat("w", keys.MaxIDLen-rest)+"/run-1/charge#1", k.ID)
	k, err = keys.Derive(with(func(id *keys.Identity) { id.WorkflowID = strings.Repeat("w", keys.MaxIDLen-rest+1) }), keys.Options{})
	require.NoError(t, err)
	require.Regexp(t, `^wf:sha256:[0-9a-f]{64}$`, k.ID)

	long := with(func(id *keys.Identity) { id.WorkflowID = strings.Repeat("w", 5000) })
	k, err = keys.Derive(long, keys.Options{})
	require.NoError(t, err)
	require.Regexp(t, `^wf:sha256:[0-9a-f]{64}$`, k.ID)
	k, err = keys.Derive(long, keys.Options{Scope: keys.ScopeRun})
	require.NoError(t, err)
	require.Regexp(t, `^run:sha256:[0-9a-f]{64}$`, k.ID)
}

// TestIDEncoding pins the spelling of each scope's IDs: it is what operators read in the
// receipts table, and changing it gives every in-flight intent a new key and token.
func TestIDEncoding(t *testing.T) {
	t.Parallel()
	odd := keys.Identity{Namespace: "default", WorkflowID: "orders/eu#1%", RunID: "run-2", OriginalRunID: "run-1",
		ActivityID: "5", ActivityType: "Charge", Step: "charge/card#v2#3"}
	standalone := keys.Identity{Namespace: "default", ActivityID: "a/1", ActivityRunID: "ar-1", ActivityType: "Charge"}
	for _, tc := range []struct {
		name string
		id   keys.Identity
		opts keys.Options
		want string
	}{
		{"Workflow", run, keys.Options{}, "wf:order-123/run-1/charge#1"},
		{"WorkflowEscaped", odd, keys.Options{}, "wf:orders%2Feu%231%25/run-1/charge%2Fcard%23v2#3"},
		{"Run", run, keys.Options{Scope: keys.ScopeRun}, "run:order-123/run-1/5"},
		{"RunEscaped", odd, keys.Options{Scope: keys.ScopeRun}, "run:orders%2Feu%231%25/run-2/5"},
		{"Standalone", standalone, keys.Options{Scope: keys.ScopeRun}, "activity:a%2F1/ar-1"},
		{"Explicit", run, keys.Options{Scope: keys.ScopeExplicit, ID: "order-123/charge#1"}, "explicit:order-123/charge#1"},
		{"ExplicitLooksDerived", run, keys.Options{Scope: keys.ScopeExplicit, ID: "wf:order-123/run-1/charge#1"}, "explicit:wf:order-123/run-1/charge#1"},
		// The occurrence after the last '#' is kept as it is only when it is all digits.
		{"Occurrence10", step("charge#10"), keys.Options{}, "wf:order-123/run-1/charge#10"},
		{"Occurrence9", step("charge#9"), keys.Options{}, "wf:order-123/run-1/charge#9"},
		{"NoOccurrence", step("charge#v2"), keys.Options{}, "wf:order-123/run-1/charge%23v2"},
		{"OccurrenceAlone", step("#3"), keys.Options{}, "wf:order-123/run-1/#3"},
		{"EmptyOccurrence", step("charge#"), keys.Options{}, "wf:order-123/run-1/charge%23"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := keys.Derive(tc.id, tc.opts)
			require.NoError(t, err)
			require.Equal(t, tc.want, k.ID)
		})
	}
	fwd := keys.Key{Namespace: "default", Operation: "charge/card", ID: "wf:order-123/run-1/charge#1"}
	refund, err := fwd.Compensation("Refund")
	require.NoError(t, err)
	require.Equal(t, "comp:charge%2Fcard/"+fwd.Token().String(), refund.ID)
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

// TestIDsAreUnambiguous feeds identities whose parts, joined naively with "/" and "#", spell
// the same string; explicit IDs equal to every derived ID (hashed ones included, and the
// "sha256:<hex>" form hashed IDs once had); and compensation IDs. Every ID must differ from
// every other: two different intents that shared an ID would share a receipt, and the second
// would replay the first one's result.
func TestIDsAreUnambiguous(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("w", 5000)
	wf := func(workflowID, originalRunID, step string) keys.Identity {
		return keys.Identity{Namespace: "default", WorkflowID: workflowID, RunID: "run-9", OriginalRunID: originalRunID,
			ActivityID: "5", ActivityType: "Charge", Step: step}
	}
	run := func(workflowID, runID, activityID string) keys.Identity {
		return keys.Identity{Namespace: "default", WorkflowID: workflowID, RunID: runID, ActivityID: activityID, ActivityType: "Charge"}
	}
	standalone := func(activityID, activityRunID string) keys.Identity {
		return keys.Identity{Namespace: "default", ActivityID: activityID, ActivityRunID: activityRunID, ActivityType: "Charge"}
	}
	derived := []struct {
		name  string
		id    keys.Identity
		scope keys.Scope
	}{
		{"Workflow", wf("a", "b", "c#1"), keys.ScopeWorkflow},
		{"WorkflowSlashInWorkflowID", wf("a/b", "c", "d#1"), keys.ScopeWorkflow},
		{"WorkflowSlashInRunID", wf("a", "b/c", "d#1"), keys.ScopeWorkflow},
		{"WorkflowSlashInStep", wf("a", "b", "c/d#1"), keys.ScopeWorkflow},
		{"WorkflowSlashesEverywhere", wf("a/b/c", "d", "1#1"), keys.ScopeWorkflow},
		{"WorkflowPercentSpellsSlash", wf("a%2Fb", "c", "d#1"), keys.ScopeWorkflow},
		{"WorkflowPercentSpellsPercent", wf("a%252Fb", "c", "d#1"), keys.ScopeWorkflow},
		{"WorkflowHashInWorkflowID", wf("a#1", "b", "c#1"), keys.ScopeWorkflow},
		{"WorkflowHashInStepName", wf("a", "b", "c#1#1"), keys.ScopeWorkflow},
		{"WorkflowPercentSpellsHash", wf("a", "b", "c%231#1"), keys.ScopeWorkflow},
		{"WorkflowSecondOccurrence", wf("a", "b", "c#2"), keys.ScopeWorkflow},
		{"WorkflowStepWithoutOccurrence", wf("a", "b", "c"), keys.ScopeWorkflow},
		{"WorkflowStepWithNonNumericOccurrence", wf("a", "b", "c#x"), keys.ScopeWorkflow},
		{"WorkflowColonInWorkflowID", wf("run:a", "b", "c#1"), keys.ScopeWorkflow},
		{"WorkflowIDLooksHashed", wf("sha256:"+strings.Repeat("0", 64), "b", "c#1"), keys.ScopeWorkflow},
		{"WorkflowLong", wf(long, "b", "c#1"), keys.ScopeWorkflow},
		{"WorkflowLongOtherStep", wf(long, "b", "c#2"), keys.ScopeWorkflow},
		{"Run", run("a", "b", "c"), keys.ScopeRun},
		{"RunSlashInWorkflowID", run("a/b", "c", "d"), keys.ScopeRun},
		{"RunSlashInRunID", run("a", "b/c", "d"), keys.ScopeRun},
		{"RunHashAndPercent", run("a#b", "c%d", "e"), keys.ScopeRun},
		{"RunLong", run(long, "b", "c"), keys.ScopeRun},
		{"Standalone", standalone("a/b", "c"), keys.ScopeRun},
		{"StandaloneSlashInRunID", standalone("a", "b/c"), keys.ScopeRun},
		{"StandaloneLong", standalone(long[:2000], "c"), keys.ScopeRun},
	}
	seen := map[string]string{}
	add := func(what, id string) {
		t.Helper()
		other, dup := seen[id]
		require.False(t, dup, "%s and %s share ID %q", other, what, id)
		seen[id] = what
	}
	var ids []string
	for _, d := range derived {
		k, err := keys.Derive(d.id, keys.Options{Scope: d.scope})
		require.NoError(t, err, d.name)
		require.LessOrEqual(t, len(k.ID), keys.MaxIDLen, d.name)
		add(d.name, k.ID)
		ids = append(ids, k.ID)
		comp, err := k.Compensation("Refund")
		require.NoError(t, err, d.name)
		add(d.name+"Compensation", comp.ID)
		ids = append(ids, comp.ID)
	}
	explicit := slices.Clone(ids)
	for _, id := range ids {
		if _, hex, ok := strings.Cut(id, ":sha256:"); ok {
			explicit = append(explicit, "sha256:"+hex) // the form hashed IDs had before they were tagged
		}
	}
	for _, raw := range explicit {
		k, err := keys.Derive(keys.Identity{Namespace: "default", ActivityType: "Charge"}, keys.Options{Scope: keys.ScopeExplicit, ID: raw})
		require.NoError(t, err, raw)
		add("Explicit("+raw+")", k.ID)
	}
}

// FuzzIDsAreUnambiguous derives the workflow-scope and run-scope IDs of two identities, and an
// explicit ID spelled like the first one's derived IDs, and checks that IDs are equal exactly
// when the identities are.
func FuzzIDsAreUnambiguous(f *testing.F) {
	f.Add("a/b", "c", "d#1", "a", "b/c", "d#1")
	f.Add("a", "b", "c#1#2", "a", "b", "c%231#2")
	f.Add("a%2Fb", "c", "d#1", "a/b", "c", "d#1")
	f.Add("w", "r", "s#1", "w", "r", "s")
	f.Add(strings.Repeat("w", 2000), "r", "s#1", strings.Repeat("w", 2000), "r", "s#2")
	f.Fuzz(func(t *testing.T, w1, r1, s1, w2, r2, s2 string) {
		identity := func(w, r, s string) keys.Identity {
			return keys.Identity{Namespace: "default", WorkflowID: w, RunID: r, OriginalRunID: r, ActivityID: s, ActivityType: "Charge", Step: s}
		}
		same := w1 == w2 && r1 == r2 && s1 == s2
		var first []string
		for _, scope := range []keys.Scope{keys.ScopeWorkflow, keys.ScopeRun} {
			a, errA := keys.Derive(identity(w1, r1, s1), keys.Options{Scope: scope})
			b, errB := keys.Derive(identity(w2, r2, s2), keys.Options{Scope: scope})
			if errA != nil || errB != nil {
				return // a part that no key may hold (empty, control characters, invalid UTF-8)
			}
			require.LessOrEqual(t, len(a.ID), keys.MaxIDLen)
			require.Equal(t, same, a.ID == b.ID, "%v: %q and %q", scope, a.ID, b.ID)
			first = append(first, a.ID)
		}
		require.NotEqual(t, first[0], first[1], "a workflow-scope ID equals a run-scope ID")
		for _, raw := range append(first, w1) {
			e, err := keys.Derive(identity(w1, r1, s1), keys.Options{Scope: keys.ScopeExplicit, ID: raw})
			if err != nil {
				continue // longer than MaxIDLen
			}
			require.NotContains(t, first, e.ID, "an explicit ID equals a derived one")
		}
	})
}

// step is run with another step header.
func step(s string) keys.Identity { return with(func(id *keys.Identity) { id.Step = s }) }
