package keys_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/keys"
)

// pinWorkflow runs the program named by how with one context that keys.StepKey (or
// keys.WithCompensation) pinned, the way a newcomer writes it: ctx shadowed by the pinned one. It
// returns the key StepKey decided first, then the key each later activity got, or the error it
// failed to schedule with.
func pinWorkflow(ctx workflow.Context, how string) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: "child-1"})
	var out []string
	run := func(f workflow.Future) {
		var k keys.Key
		if err := f.Get(ctx, &k); err != nil {
			out = append(out, "error: "+err.Error())
			return
		}
		out = append(out, k.Operation+" "+k.ID)
	}
	ctx, k, err := keys.StepKey(ctx, "charge")
	if err != nil {
		return nil, err
	}
	out = append(out, k.Operation+" "+k.ID)
	switch how {
	case "ThenWithStep":
		run(workflow.ExecuteActivity(ctx, keyActivity))
		run(workflow.ExecuteActivity(keys.WithStep(ctx, "ship"), keyActivity))
	case "ThenWithID":
		run(workflow.ExecuteActivity(ctx, keyActivity))
		run(workflow.ExecuteActivity(keys.WithID(keys.WithStep(ctx, "ship"), "order-9"), keyActivity))
	case "ThenSameStep":
		run(workflow.ExecuteActivity(ctx, keyActivity))
		run(workflow.ExecuteActivity(keys.WithStep(ctx, "charge"), keyActivity))
	case "Twice":
		run(workflow.ExecuteActivity(ctx, keyActivity))
		run(workflow.ExecuteActivity(ctx, keyActivity))
	case "LocalThenActivity":
		run(workflow.ExecuteLocalActivity(ctx, activityKey))
		run(workflow.ExecuteActivity(ctx, keyActivity))
	case "WithStepBeforeUse":
		run(workflow.ExecuteActivity(keys.WithStep(ctx, "ship"), keyActivity))
		run(workflow.ExecuteActivity(ctx, keyActivity))
	case "CompensationTwice":
		cctx, ck, err := keys.WithCompensation(ctx, k, "refund")
		if err != nil {
			return nil, err
		}
		out = append(out, ck.Operation+" "+ck.ID)
		run(workflow.ExecuteActivity(cctx, keyActivity))
		run(workflow.ExecuteActivity(cctx, keyActivity))
	case "ChildBeforeUse":
		var s string
		if err := workflow.ExecuteChildWorkflow(ctx, "child").Get(ctx, &s); err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, s)
		}
		run(workflow.ExecuteActivity(ctx, keyActivity))
	case "ChildAfterUse":
		run(workflow.ExecuteActivity(ctx, keyActivity))
		var s string
		if err := workflow.ExecuteChildWorkflow(ctx, "child").Get(ctx, &s); err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, s)
		}
	}
	return out, nil
}

func childWorkflow(workflow.Context) (string, error) { return "child ran", nil }

// TestStepKeyKeysOneActivity: the context StepKey returns gives its key to exactly one activity,
// the first scheduled with it. A step named on it afterwards gets its own key, as if StepKey had
// not been called; a second activity scheduled with it as it is, and a child workflow started
// with it before its key was used, are refused: they would otherwise run under a key that names
// another intent (ship under the charge's key is never called, and returns the charge's result).
func TestStepKeyKeysOneActivity(t *testing.T) {
	t.Parallel()
	const (
		charge = `^charge wf:order-1/[^/]+/charge#1$`
		used   = `^error: .*` + `a context from keys.StepKey or keys.WithCompensation keys exactly one activity: activity Key was scheduled with the context that keys\.`
	)
	for _, tc := range []struct {
		how  string
		want []string // regular expressions, one per line of pinWorkflow's output
	}{
		{"ThenWithStep", []string{charge, charge, `^ship wf:order-1/[^/]+/ship#1$`}},
		{"ThenWithID", []string{charge, charge, `^ship explicit:order-9$`}},
		{"ThenSameStep", []string{charge, charge, `^charge wf:order-1/[^/]+/charge#2$`}},
		{"Twice", []string{charge, charge, used}},
		{"LocalThenActivity", []string{charge, charge, used}},
		{"WithStepBeforeUse", []string{charge, `^ship wf:order-1/[^/]+/ship#1$`, charge}},
		{"CompensationTwice", []string{charge, `^refund comp:charge/`, `^refund comp:charge/`, used}},
		{"ChildBeforeUse", []string{charge, `^error: .*a context from keys.StepKey or keys.WithCompensation keys exactly one activity: child workflow child was started with the context that keys.StepKey\(ctx, "charge"\) returned before any activity took its key`, charge}},
		{"ChildAfterUse", []string{charge, charge, `^child ran$`}},
	} {
		t.Run(tc.how, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, "order-1", "", false)
			env.RegisterWorkflowWithOptions(pinWorkflow, workflow.RegisterOptions{Name: "pin"})
			env.RegisterWorkflowWithOptions(childWorkflow, workflow.RegisterOptions{Name: "child"})
			env.ExecuteWorkflow("pin", tc.how)
			require.NoError(t, env.GetWorkflowError())
			var got []string
			require.NoError(t, env.GetWorkflowResult(&got))
			require.Len(t, got, len(tc.want), "got %q", got)
			for i, re := range tc.want {
				require.Regexp(t, re, got[i], "line %d of %q", i, got)
			}
			if tc.how == "CompensationTwice" {
				require.Equal(t, got[1], got[2], "the compensation's activity got another key than WithCompensation returned")
			}
		})
	}
}

// refusedParent starts a child that charges, with the child workflow ID "ship".
func refusedParent(ctx workflow.Context) (string, error) {
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: "ship"})
	var got string
	err := workflow.ExecuteChildWorkflow(keys.WithStep(ctx, "ship"), "charging-child").Get(ctx, &got)
	return got, err
}

// TestChildOfARefusedParentIsRefused: a parent refused its workflow-scope keys (it continued as
// new without the epoch header, or retries a cron run) cannot give its child an epoch that tells
// this start of the child from the one before; keyed by its own first run, the child started
// again would charge again. Its workflow-scope keys are refused too.
func TestChildOfARefusedParentIsRefused(t *testing.T) {
	t.Parallel()
	env := newEnv(t, "order-1", "", false)
	env.SetContinuedExecutionRunID("the-run-before") // and no epoch header: refused
	env.RegisterWorkflowWithOptions(refusedParent, workflow.RegisterOptions{Name: "parent"})
	env.RegisterWorkflowWithOptions(chargingChild, workflow.RegisterOptions{Name: "charging-child"})
	env.RegisterActivityWithOptions(func(ctx context.Context) (string, error) {
		k, err := keys.FromActivity(ctx)
		return k.ID, err
	}, activity.RegisterOptions{Name: keyActivity})
	env.ExecuteWorkflow("parent")
	err := env.GetWorkflowError()
	require.Error(t, err, "the child of a refused parent was keyed")
	require.ErrorContains(t, err, keys.ErrNoIdentity.Error())
	require.ErrorContains(t, err, "its parent")
}
