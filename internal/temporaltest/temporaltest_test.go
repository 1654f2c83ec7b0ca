package temporaltest_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/internal/temporaltest"
)

// recorder is a testing.TB whose Fatalf records the message and stops the call, as the real one
// stops the test.
type recorder struct {
	testing.TB
	failed string
}

type stopped struct{}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(stopped{})
}

// check runs RequireAppError on a recorder and returns its failure message, "" if it passed.
func check(err error, errType string, retryable bool, msgAndArgs ...any) (failed string) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != (stopped{}) {
			panic(p)
		}
		failed = r.failed
	}()
	temporaltest.RequireAppError(r, err, errType, retryable, msgAndArgs...)
	return ""
}

func TestRequireAppError(t *testing.T) {
	t.Parallel()
	final := fmt.Errorf("charge: %w", temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil))
	transient := temporal.NewApplicationError("try again", "Busy")

	t.Run("Passes", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, check(final, "CardDeclined", false))
		require.Empty(t, check(transient, "Busy", true))
		require.Equal(t, "card declined", temporaltest.RequireAppError(t, final, "CardDeclined", false).Message())
	})

	t.Run("FailsSayingWhatCame", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct {
			err       error
			errType   string
			retryable bool
			want      string
		}{
			"NoError":       {nil, "CardDeclined", false, `want a non-retryable error of type "CardDeclined", got no error`},
			"NotAnAppError": {errors.New("boom"), "CardDeclined", false, `got an error that is no application error (*errors.errorString): boom`},
			"OtherType":     {final, "Busy", false, `want a non-retryable error of type "Busy", got a non-retryable error of type "CardDeclined"`},
			"Retryable":     {transient, "Busy", false, `want a non-retryable error of type "Busy", got a retryable error of type "Busy"`},
			"NonRetryable":  {final, "CardDeclined", true, `want a retryable error of type "CardDeclined", got a non-retryable error of type "CardDeclined"`},
		} {
			require.Contains(t, check(tc.err, tc.errType, tc.retryable), tc.want, name)
		}
	})

	t.Run("SaysWhichCall", func(t *testing.T) {
		t.Parallel()
		require.Regexp(t, `^attempt 2: want`, check(nil, "CardDeclined", false, "attempt %d", 2))
	})
}
