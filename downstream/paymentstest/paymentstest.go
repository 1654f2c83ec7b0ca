// Package paymentstest is the conformance suite that every downstream.Payments implementation
// passes: the provider's idempotency contract, as a saga relies on it. Run it from a test of
// your own implementation:
//
//	func TestConformance(t *testing.T) {
//		paymentstest.Run(t, func(t *testing.T) paymentstest.Provider { ... })
//	}
package paymentstest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/downstream"
	"github.com/tempotent/tempotent/keys"
)

// Provider is one implementation under test, against a fresh provider.
type Provider struct {
	// Payments is the implementation.
	Payments downstream.Payments
	// FailNext makes the provider answer the next request of the given token with a 500 before
	// doing anything, as a load balancer in front of it would.
	FailNext func(token keys.Token)
	// Charges counts the charges the provider made for a token (from its ledger, never from
	// the client's view).
	Charges func(token keys.Token) int
	// Refunds counts the refunds the provider made for the charge made under a token.
	Refunds func(chargeToken keys.Token) int
}

// Run runs the suite; newProvider returns a fresh provider for each subtest.
func Run(t *testing.T, newProvider func(t *testing.T) Provider) {
	ctx := context.Background()
	token := func(id string) (context.Context, keys.Token) {
		k := keys.Key{Namespace: "conformance", Operation: "charge", ID: t.Name() + "/" + id}
		return keys.WithToken(ctx, k.Token()), k.Token()
	}
	req := downstream.ChargeRequest{Amount: 4200, Currency: "eur", Source: "tok_visa"}

	t.Run("SameKeySameCharge", func(t *testing.T) {
		p := newProvider(t)
		cctx, tok := token("a")
		first, err := p.Payments.Charge(cctx, req)
		require.NoError(t, err)
		again, err := p.Payments.Charge(cctx, req)
		require.NoError(t, err)
		require.Equal(t, first.ID, again.ID)
		require.Equal(t, 1, p.Charges(tok))
		found, ok, err := p.Payments.Lookup(ctx, tok)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, first.ID, found.ID)
	})

	// downstream.ReconcileCharge on this provider finds what a lost attempt charged, as the
	// activity's own call returned it, and nothing under a token that never charged.
	t.Run("ReconcileChargeFindsTheLostAttemptsCharge", func(t *testing.T) {
		p := newProvider(t)
		cctx, tok := token("lost")
		charged, err := p.Payments.Charge(cctx, req)
		require.NoError(t, err)
		reconcile := downstream.ReconcileCharge(p.Payments)
		got, found, err := reconcile(ctx, tok)
		require.NoError(t, err)
		require.True(t, found, "the charge made under the token was not found")
		require.Equal(t, charged, got, "reconcile's result is not what the activity's own call returned")
		_, never := token("never")
		_, found, err = reconcile(ctx, never)
		require.NoError(t, err)
		require.False(t, found, "a charge was found under a token that never charged")
		require.Equal(t, 1, p.Charges(tok), "reconcile charged")
	})

	t.Run("RetryAfter500IsOneCharge", func(t *testing.T) {
		p := newProvider(t)
		cctx, tok := token("b")
		p.FailNext(tok)
		_, err := p.Payments.Charge(cctx, req)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.False(t, appErr.NonRetryable(), "a 500 must be retried")
		_, err = p.Payments.Charge(cctx, req)
		require.NoError(t, err)
		require.Equal(t, 1, p.Charges(tok))
	})

	t.Run("RefundOfRefundedIsOneRefund", func(t *testing.T) {
		p := newProvider(t)
		cctx, tok := token("c")
		_, err := p.Payments.Charge(cctx, req)
		require.NoError(t, err)
		rctx, _ := token("c/refund")
		for range 2 { // a retried compensation
			r, err := p.Payments.Refund(rctx, tok)
			require.NoError(t, err)
			require.Equal(t, "succeeded", r.Status)
		}
		otherCtx, _ := token("c/refund-again") // another compensation key for the same charge
		_, err = p.Payments.Refund(otherCtx, tok)
		require.NoError(t, err)
		require.Equal(t, 1, p.Refunds(tok))
	})

	t.Run("RefundOfUnknownChargeIsANoOp", func(t *testing.T) {
		p := newProvider(t)
		_, never := token("never-charged")
		rctx, _ := token("d/refund")
		r, err := p.Payments.Refund(rctx, never)
		require.NoError(t, err)
		require.Equal(t, downstream.RefundNoCharge, r.Status)
		require.Equal(t, 0, p.Refunds(never))
	})

	t.Run("MismatchedParameters", func(t *testing.T) {
		p := newProvider(t)
		cctx, tok := token("e")
		_, err := p.Payments.Charge(cctx, req)
		require.NoError(t, err)
		changed := req
		changed.Amount++
		_, err = p.Payments.Charge(cctx, changed)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.Equal(t, downstream.ErrTypeMismatch, appErr.Type())
		require.True(t, appErr.NonRetryable())
		require.Equal(t, 1, p.Charges(tok))
	})

	t.Run("DeclineIsNonRetryable", func(t *testing.T) {
		p := newProvider(t)
		cctx, tok := token("f")
		declined := req
		declined.Source = "tok_chargeDeclined"
		_, err := p.Payments.Charge(cctx, declined)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.Equal(t, downstream.ErrTypeRejected, appErr.Type())
		require.True(t, appErr.NonRetryable())
		e, ok := downstream.As(err)
		require.True(t, ok)
		require.Equal(t, "card_declined", e.Code)
		require.Equal(t, 0, p.Charges(tok))
	})

	t.Run("NoKeyIsRefused", func(t *testing.T) {
		p := newProvider(t)
		_, err := p.Payments.Charge(ctx, req)
		require.True(t, errors.Is(err, downstream.ErrNoKey), "an unkeyed charge was not refused: %v", err)
	})
}
