package keys

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// TestIDEncoding pins the spelling of each scope's IDs: it is what operators read in the
// receipts table, and changing it gives every in-flight intent a new key and token.
func TestIDEncoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, got, want string }{
		{"Workflow", workflowScopeID("order-123", "run-1", "charge#1"), "wf:order-123/run-1/charge#1"},
		{"WorkflowEscaped", workflowScopeID("orders/eu#1%", "run-1", "charge/card#v2#3"), "wf:orders%2Feu%231%25/run-1/charge%2Fcard%23v2#3"},
		{"WorkflowAfterContinueAsNew", workflowScopeID("order-123", "can:run-1", "charge#1"), "wf:order-123/can:run-1/charge#1"},
		{"Run", runScopeID("order-123", "run-1", "charge#1"), "run:order-123/run-1/charge#1"},
		{"RunEscaped", runScopeID("orders/eu#1%", "run-2", "charge#1"), "run:orders%2Feu%231%25/run-2/charge#1"},
		{"Update", updateScopeID("order-123", "upd/1", "charge#1"), "upd:order-123/upd%2F1/charge#1"},
		{"Standalone", standaloneScopeID("a/1", "ar-1"), "activity:a%2F1/ar-1"},
		{"Explicit", explicitScopeID("order-123/charge#1"), "explicit:order-123/charge#1"},
		{"ExplicitLooksDerived", explicitScopeID("wf:order-123/run-1/charge#1"), "explicit:wf:order-123/run-1/charge#1"},
		// The occurrence after the last '#' is kept as it is only when it is all digits.
		{"Occurrence10", workflowScopeID("o", "r", "charge#10"), "wf:o/r/charge#10"},
		{"NoOccurrence", workflowScopeID("o", "r", "charge#v2"), "wf:o/r/charge%23v2"},
		{"OccurrenceAlone", workflowScopeID("o", "r", "#3"), "wf:o/r/#3"},
		{"EmptyOccurrence", workflowScopeID("o", "r", "charge#"), "wf:o/r/charge%23"},
	} {
		require.Equal(t, tc.want, tc.got, tc.name)
	}
	fwd := Key{Namespace: "default", Operation: "charge/card", ID: "wf:order-123/run-1/charge#1"}
	refund, err := fwd.Compensation("Refund")
	require.NoError(t, err)
	require.Equal(t, "comp:charge%2Fcard/"+fwd.Token().String(), refund.ID)

	// A derived ID is hashed only when it is longer than MaxIDLen.
	const rest = len("wf:") + len("/run-1/charge#1")
	require.Equal(t, "wf:"+strings.Repeat("w", MaxIDLen-rest)+"/run-1/charge#1", workflowScopeID(strings.Repeat("w", MaxIDLen-rest), "run-1", "charge#1"))
	require.Regexp(t, `^wf:sha256:[0-9a-f]{64}$`, workflowScopeID(strings.Repeat("w", MaxIDLen-rest+1), "run-1", "charge#1"))
	require.Regexp(t, `^run:sha256:[0-9a-f]{64}$`, runScopeID(strings.Repeat("w", 5000), "r", "s#1"))
	require.Regexp(t, `^upd:sha256:[0-9a-f]{64}$`, updateScopeID(strings.Repeat("w", 5000), "u", "s#1"))
}

// TestIDsAreUnambiguous feeds identities whose parts, joined naively with "/" and "#", spell
// the same string; explicit IDs equal to every derived ID (hashed ones included, and the
// "sha256:<hex>" form hashed IDs once had); and compensation IDs. Every ID must differ from
// every other: two different intents that shared an ID would share a receipt, and the second
// would replay the first one's result.
func TestIDsAreUnambiguous(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("w", 5000)
	derived := map[string]string{
		"Workflow":                             workflowScopeID("a", "b", "c#1"),
		"WorkflowSlashInWorkflowID":            workflowScopeID("a/b", "c", "d#1"),
		"WorkflowSlashInEpoch":                 workflowScopeID("a", "b/c", "d#1"),
		"WorkflowSlashInStep":                  workflowScopeID("a", "b", "c/d#1"),
		"WorkflowSlashesEverywhere":            workflowScopeID("a/b/c", "d", "1#1"),
		"WorkflowPercentSpellsSlash":           workflowScopeID("a%2Fb", "c", "d#1"),
		"WorkflowPercentSpellsPercent":         workflowScopeID("a%252Fb", "c", "d#1"),
		"WorkflowHashInWorkflowID":             workflowScopeID("a#1", "b", "c#1"),
		"WorkflowHashInStepName":               workflowScopeID("a", "b", "c#1#1"),
		"WorkflowPercentSpellsHash":            workflowScopeID("a", "b", "c%231#1"),
		"WorkflowSecondOccurrence":             workflowScopeID("a", "b", "c#2"),
		"WorkflowStepWithNonNumericOccurrence": workflowScopeID("a", "b", "c#x"),
		"WorkflowColonInWorkflowID":            workflowScopeID("run:a", "b", "c#1"),
		"WorkflowContinuedEpoch":               workflowScopeID("a", "can:b", "c#1"),
		"WorkflowIDLooksHashed":                workflowScopeID("sha256:"+strings.Repeat("0", 64), "b", "c#1"),
		"WorkflowLong":                         workflowScopeID(long, "b", "c#1"),
		"WorkflowLongOtherStep":                workflowScopeID(long, "b", "c#2"),
		"Run":                                  runScopeID("a", "b", "c#1"),
		"RunSlashInWorkflowID":                 runScopeID("a/b", "c", "d#1"),
		"RunSlashInRunID":                      runScopeID("a", "b/c", "d#1"),
		"RunHashAndPercent":                    runScopeID("a#b", "c%d", "e#1"),
		"RunLong":                              runScopeID(long, "b", "c#1"),
		"Update":                               updateScopeID("a", "b", "c#1"),
		"UpdateSlashInUpdateID":                updateScopeID("a", "b/c", "d#1"),
		"UpdateLong":                           updateScopeID(long, "b", "c#1"),
		"Standalone":                           standaloneScopeID("a/b", "c"),
		"StandaloneSlashInRunID":               standaloneScopeID("a", "b/c"),
		"StandaloneLong":                       standaloneScopeID(long[:2000], "c"),
	}
	seen := map[string]string{}
	add := func(what, id string) {
		t.Helper()
		other, dup := seen[id]
		require.False(t, dup, "%s and %s share ID %q", other, what, id)
		seen[id] = what
	}
	var ids []string
	for _, name := range slices.Sorted(mapKeys(derived)) {
		id := derived[name]
		require.LessOrEqual(t, len(id), MaxIDLen, name)
		add(name, id)
		ids = append(ids, id)
		comp, err := Key{Namespace: "default", Operation: "Charge", ID: id}.Compensation("Refund")
		require.NoError(t, err, name)
		add(name+"Compensation", comp.ID)
		ids = append(ids, comp.ID)
	}
	explicit := slices.Clone(ids)
	for _, id := range ids {
		if _, hex, ok := strings.Cut(id, ":sha256:"); ok {
			explicit = append(explicit, "sha256:"+hex) // the form hashed IDs had before they were tagged
		}
	}
	for _, raw := range explicit {
		k, err := Explicit("default", "", "Charge", raw)
		require.NoError(t, err, raw)
		add("Explicit("+raw+")", k.ID)
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// FuzzIDsAreUnambiguous spells the workflow-, run- and update-scope IDs of two identities, and an
// explicit ID spelled like the first one's, and checks that IDs are equal exactly when the
// identities are.
func FuzzIDsAreUnambiguous(f *testing.F) {
	f.Add("a/b", "c", "d", "a", "b/c", "d")
	f.Add("a", "b", "c#1", "a", "b", "c%231")
	f.Add("a%2Fb", "c", "d", "a/b", "c", "d")
	f.Add(strings.Repeat("w", 2000), "r", "s", strings.Repeat("w", 2000), "r", "s#1")
	f.Fuzz(func(t *testing.T, w1, r1, s1, w2, r2, s2 string) {
		for _, p := range []string{w1, r1, s1, w2, r2, s2} {
			if validatePart("part", p, 1<<20) != nil {
				return // a part that no key may hold (empty, control characters, invalid UTF-8)
			}
		}
		same := w1 == w2 && r1 == r2 && s1 == s2
		var first []string
		for _, spell := range []func(string, string, string) string{workflowScopeID, runScopeID, updateScopeID} {
			a, b := spell(w1, r1, s1+"#1"), spell(w2, r2, s2+"#1")
			require.LessOrEqual(t, len(a), MaxIDLen)
			require.Equal(t, same, a == b, "%q and %q", a, b)
			first = append(first, a)
		}
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(first))), 3, "two scopes share an ID")
		for _, raw := range append(first, w1) {
			if validateID(raw) == nil {
				require.NotContains(t, first, explicitScopeID(raw), "an explicit ID equals a derived one")
			}
		}
	})
}

// TestEpoch pins how a run tells a retry from a Continue-As-New or a cron run (see epoch.go);
// the dev-server tests of the activity package check the table against a real server.
func TestEpoch(t *testing.T) {
	t.Parallel()
	exec := func(run string) workflow.Execution { return workflow.Execution{ID: "order-1", RunID: run} }
	first := workflow.Info{WorkflowExecution: exec("r1"), OriginalRunID: "r1", FirstRunID: "r1", Attempt: 1}
	reset := first
	reset.WorkflowExecution = exec("r1b")
	retry := workflow.Info{WorkflowExecution: exec("r2"), OriginalRunID: "r2", FirstRunID: "r1", ContinuedExecutionRunID: "r1", Attempt: 2}
	continued := workflow.Info{WorkflowExecution: exec("r3"), OriginalRunID: "r3", FirstRunID: "r1", ContinuedExecutionRunID: "r1", Attempt: 1}
	continuedRetry := continued
	continuedRetry.WorkflowExecution, continuedRetry.OriginalRunID, continuedRetry.ContinuedExecutionRunID, continuedRetry.Attempt = exec("r4"), "r4", "r3", 2
	cron1 := workflow.Info{WorkflowExecution: exec("c1"), OriginalRunID: "c1", FirstRunID: "c1", Attempt: 1, CronSchedule: "@hourly"}
	cron2 := workflow.Info{WorkflowExecution: exec("c2"), OriginalRunID: "c2", FirstRunID: "c1", ContinuedExecutionRunID: "c1", Attempt: 1, CronSchedule: "@hourly"}
	cronRetry := cron2
	cronRetry.WorkflowExecution, cronRetry.OriginalRunID, cronRetry.ContinuedExecutionRunID, cronRetry.Attempt = exec("c3"), "c3", "c2", 2
	testEnv := workflow.Info{WorkflowExecution: exec("default-test-run-id"), Attempt: 1}

	chainRetry := continuedRetry // attempt 3 of the first run: it retries attempt 2, run r4
	chainRetry.WorkflowExecution, chainRetry.OriginalRunID, chainRetry.ContinuedExecutionRunID, chainRetry.Attempt = exec("r5"), "r5", "r4", 3
	fc := temporal.GetDefaultFailureConverter()
	failed := fc.FailureToError(fc.ErrorToFailure(errors.New("the provider answered 502")))
	refused := fc.FailureToError(fc.ErrorToFailure(markRefused(errors.New("the provider answered 502"))))

	can := nextEpoch(&first)
	for _, tc := range []struct {
		name    string
		info    workflow.Info
		header  string
		lastErr error
		want    string // "" for a refusal
	}{
		{"First", first, "", nil, "r1"},
		{"Reset", reset, "", nil, "r1"},
		{"Retry", retry, "", failed, "r1"},
		{"RetryAgain", chainRetry, "", failed, "r1"},
		{"ContinueAsNew", continued, can, nil, "can:r1"},
		{"ContinueAsNewRetried", continuedRetry, can, failed, "can:r1"},
		{"ContinueAsNewWithoutHeader", continued, "", nil, ""},
		{"ContinueAsNewWithoutHeaderRetried", continuedRetry, "", refused, ""},
		{"ContinueAsNewWithoutHeaderRetriedAgain", chainRetry, "", refused, ""},
		{"CronFirst", cron1, "", nil, "c1"},
		{"CronNext", cron2, "", nil, "c2"},
		{"CronRetry", cronRetry, "", failed, ""},
		{"TestEnvironment", testEnv, "", nil, "default-test-run-id"},
	} {
		got := epochOf(&tc.info, epochHeader{epoch: tc.header}, tc.lastErr)
		require.Equal(t, tc.want, got.epoch, tc.name)
		require.Equal(t, tc.want == "", got.refusal != "", tc.name)
	}
}

// TestMarkRefusedKeepsTheRetry: the mark on a refused run's failure changes nothing the server
// retries by — the failure's type, retryability and message — or the retry would differ from the
// one the workflow's author configured.
func TestMarkRefusedKeepsTheRetry(t *testing.T) {
	t.Parallel()
	fc := temporal.GetDefaultFailureConverter()
	for name, err := range map[string]error{
		"Plain":        errors.New("the provider answered 502"),
		"Wrapped":      fmt.Errorf("charge: %w", errors.New("the provider answered 502")),
		"Application":  temporal.NewApplicationError("card declined", "CardDeclined"),
		"NonRetryable": temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil),
	} {
		want, got := fc.ErrorToFailure(err), fc.ErrorToFailure(markRefused(err))
		require.Equal(t, want.GetMessage(), got.GetMessage(), name)
		require.Equal(t, want.GetApplicationFailureInfo().GetType(), got.GetApplicationFailureInfo().GetType(), name)
		require.Equal(t, want.GetApplicationFailureInfo().GetNonRetryable(), got.GetApplicationFailureInfo().GetNonRetryable(), name)
		require.True(t, markedRefused(fc.FailureToError(got)), name)
		require.False(t, markedRefused(fc.FailureToError(want)), name)
	}
	activityErr := fc.FailureToError(&failurepb.Failure{Message: "activity error", Cause: fc.ErrorToFailure(errors.New("the provider answered 502")),
		FailureInfo: &failurepb.Failure_ActivityFailureInfo{ActivityFailureInfo: &failurepb.ActivityFailureInfo{ActivityType: &commonpb.ActivityType{Name: "Charge"}}}})
	require.IsType(t, &temporal.ActivityError{}, activityErr)
	got := fc.ErrorToFailure(markRefused(activityErr))
	require.Empty(t, got.GetApplicationFailureInfo().GetType(), "an activity's failure has no type, and is retried whatever the policy's non-retryable types")
	require.False(t, got.GetApplicationFailureInfo().GetNonRetryable())
	require.True(t, markedRefused(fc.FailureToError(got)))
	timeout := temporal.NewTimeoutError(0, nil)
	require.Same(t, timeout, markRefused(timeout), "a timeout's kind decides its retry: it passes unmarked")
}
