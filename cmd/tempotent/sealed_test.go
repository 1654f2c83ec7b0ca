package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
)

// On a store whose workers seal results (Config.Codecs), the command, which has no codecs,
// shows a recorded result sealed, never its cleartext, and refuses to resolve with a result,
// which it could only store unsealed; the receipt stays unresolved for a resolution from Go.
func TestSealedResultsShownSealedAndNotResolvedByTheCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := activity.NewStore(pgtest.Pool(t), &activity.Config{Schema: schema, Codecs: []converter.PayloadCodec{receipttest.Rot13Codec{}}})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	tempotent := cli{t: t, schema: schema}

	done := activity.Call{Key: keys.Key{Namespace: "default", Operation: "Charge", ID: "order-0"}, Fingerprint: must(keys.FingerprintOf(0))}
	_, err = activity.Do(ctx, s, done, func(context.Context) (charge, error) { return charge{ID: "ch_cleartext_secret"}, nil })
	require.NoError(t, err)
	for _, args := range [][]string{{"receipts", "show", string(done.Key.Token())}, {"receipts", "show", string(done.Key.Token()), "--json"}} {
		out := tempotent.ok(args...)
		require.Contains(t, out, receipttest.Rot13Encoding, "%v does not say the result is sealed", args)
		require.NotContains(t, out, "ch_cleartext_secret", "%v printed a sealed result decoded", args)
	}

	tok := unknownReceipt(t, s, "order-1")
	code, _, errOut := tempotent.run("receipts", "resolve", string(tok), "--applied", "--result", `{"id":"ch_by_hand"}`, "--reason", "dashboard")
	require.Equal(t, exitRefused, code, errOut)
	t.Logf("$ tempotent receipts resolve --applied ...\n%s", errOut)
	require.Contains(t, errOut, "operator.Client")
	require.Contains(t, errOut, "Codecs")
	r, err := operatorOn(t, schema).Receipt(ctx, tok)
	require.NoError(t, err)
	require.True(t, r.Unresolved, "a refused resolution changed the receipt")
}
