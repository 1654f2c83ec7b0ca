package engine

import (
	"context"

	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
)

// origin is where a receipt came from, recorded when it is first written so that an operator can
// go from a receipt to the Temporal execution that made it (and from a forward step to its
// compensation). Every field is nil outside an activity.
type origin struct {
	workflowID, runID, activityID, activityType, compensates *string
}

func originOf(ctx context.Context) origin {
	var o origin
	if fwd, ok := keys.CompensatesFrom(ctx); ok {
		o.compensates = ptr(string(fwd))
	}
	if !sdkactivity.IsActivity(ctx) {
		return o
	}
	info := sdkactivity.GetInfo(ctx)
	o.workflowID = nonEmpty(info.WorkflowExecution.ID)
	o.runID = nonEmpty(info.WorkflowExecution.RunID)
	o.activityID = nonEmpty(info.ActivityID)
	o.activityType = nonEmpty(info.ActivityType.Name)
	return o
}

// args are the origin's columns as statement arguments, in the order the statements take them.
func (o origin) args() []any {
	return []any{o.workflowID, o.runID, o.activityID, o.activityType, o.compensates}
}

func ptr[T any](v T) *T { return &v }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
