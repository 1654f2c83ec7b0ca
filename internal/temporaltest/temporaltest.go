// Package temporaltest holds this module's test assertions on the errors that cross into
// Temporal. It is internal: users assert on the exported ErrType constants with errors.As.
package temporaltest

import (
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/sdk/temporal"
)

// RequireAppError fails tb at once unless err is, or wraps, a *temporal.ApplicationError of
// type errType that Temporal may retry exactly when retryable is true. It returns that error for
// further checks (message, details, next retry delay). msgAndArgs, as in testify, say which
// call failed: a format string and its arguments.
func RequireAppError(tb testing.TB, err error, errType string, retryable bool, msgAndArgs ...any) *temporal.ApplicationError {
	tb.Helper()
	want := fmt.Sprintf("a %s error of type %q", retryability(retryable), errType)
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		tb.Fatalf("%swant %s, got no error", prefix(msgAndArgs), want)
	case !errors.As(err, &appErr):
		tb.Fatalf("%swant %s, got an error that is no application error (%T): %v", prefix(msgAndArgs), want, err, err)
	case appErr.Type() != errType || appErr.NonRetryable() == retryable:
		tb.Fatalf("%swant %s, got a %s error of type %q: %v", prefix(msgAndArgs), want, retryability(!appErr.NonRetryable()), appErr.Type(), err)
	}
	return appErr
}

func retryability(retryable bool) string {
	if retryable {
		return "retryable"
	}
	return "non-retryable"
}

// prefix formats msgAndArgs the way testify does, followed by ": ", or returns "".
func prefix(msgAndArgs []any) string {
	switch len(msgAndArgs) {
	case 0:
		return ""
	case 1:
		return fmt.Sprint(msgAndArgs[0]) + ": "
	}
	format, ok := msgAndArgs[0].(string)
	if !ok {
		return fmt.Sprint(msgAndArgs...) + ": "
	}
	return fmt.Sprintf(format, msgAndArgs[1:]...) + ": "
}
