package webhook_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/webhook"
)

// now is the clock of every table test: signatures are made at, or around, it.
var now = time.Unix(1_700_000_000, 0).UTC()

const (
	stripeSecret    = "whsec_stripe_current_0123456789"
	stripeOldSecret = "whsec_stripe_previous_987654321"
	// swSecret is the Standard Webhooks reference libraries' test secret (24 bytes).
	swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// swOldSecret is another 32-byte secret, for rotation.
	swOldSecret = "whsec_YW5vdGhlci1yb3RhdGVkLXNlY3JldC0zMi1ieXRlcyE="
	// otherSecret is a secret the verifiers do not hold.
	otherSecret = "whsec_b3RoZXItc2VjcmV0LW5vdC1jb25maWd1cmVk"
)

var sentinels = []error{webhook.ErrNoSignature, webhook.ErrMalformed, webhook.ErrStale, webhook.ErrSignature}

// requireRefused checks that err is a *VerifyError of scheme matching want and no other
// sentinel, and that its message holds none of secrets nor any of the signatures that were
// expected.
func requireRefused(t *testing.T, err error, scheme string, want error, secrets []string, expected []string) {
	t.Helper()
	require.Error(t, err)
	verr, ok := errors.AsType[*webhook.VerifyError](err)
	require.True(t, ok, "want a *webhook.VerifyError, got %T: %v", err, err)
	require.Equal(t, scheme, verr.Scheme)
	for _, s := range sentinels {
		require.Equal(t, s == want, errors.Is(err, s), "errors.Is(err, %q) on %q", s, err)
	}
	require.NotEmpty(t, verr.Detail)
	for _, s := range slices.Concat(secrets, expected) {
		require.NotContains(t, err.Error(), s, "the message leaks a secret or an expected signature")
	}
}

func stripeHeader(values ...string) http.Header {
	return http.Header{"Stripe-Signature": values}
}

// v1 returns the v1 element of a Stripe-Signature value.
func v1(signature string) string {
	_, sig, _ := strings.Cut(signature, ",")
	return sig
}

// padTo returns s followed by as many 'a' as make it n bytes long.
func padTo(s string, n int) string {
	return s + strings.Repeat("a", n-len(s))
}

func TestStripeVerify(t *testing.T) {
	t.Parallel()

	body := []byte(`{"id":"evt_1","object":"event","type":"charge.succeeded"}`)
	signed := func(secret string, at time.Time, body []byte) http.Header {
		return stripeHeader(webhook.SignStripe(secret, at, body))
	}
	at := "t=" + strconv.FormatInt(now.Unix(), 10)
	good := v1(webhook.SignStripe(stripeSecret, now, body))
	junk := "v1=" + strings.Repeat("ab", 32)

	tests := []struct {
		name     string
		verifier webhook.Stripe
		header   http.Header
		body     []byte
		want     webhook.Delivery
		wantErr  error
	}{
		{name: "Valid", header: signed(stripeSecret, now, body), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "RotationOldSecret", verifier: webhook.Stripe{Secrets: []string{stripeSecret, stripeOldSecret}}, header: signed(stripeOldSecret, now, body), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "RotationNewSecret", verifier: webhook.Stripe{Secrets: []string{stripeOldSecret, stripeSecret}}, header: signed(stripeSecret, now, body), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "RotationBothSignaturesSent", header: stripeHeader(at + "," + v1(webhook.SignStripe(stripeOldSecret, now, body)) + "," + good), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "V0AndUnknownElementsIgnored", header: stripeHeader(at + ",v0=deadbeef," + good + ",x=y"), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "SpacesAroundElements", header: stripeHeader(at + ", " + good), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "EightSignatures", header: stripeHeader(at + strings.Repeat(","+junk, 7) + "," + good), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "HeaderAtTheLimit", header: stripeHeader(padTo(at+","+good+",x=", 4096)), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now}},
		{name: "AtTolerancePast", header: signed(stripeSecret, now.Add(-webhook.ToleranceDefault), body), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now.Add(-webhook.ToleranceDefault)}},
		{name: "AtToleranceFuture", header: signed(stripeSecret, now.Add(webhook.ToleranceDefault), body), want: webhook.Delivery{ID: "evt_1", Type: "charge.succeeded", Timestamp: now.Add(webhook.ToleranceDefault)}},
		{name: "NoType", header: signed(stripeSecret, now, []byte(`{"id":"evt_2"}`)), body: []byte(`{"id":"evt_2"}`), want: webhook.Delivery{ID: "evt_2", Timestamp: now}},

		{name: "WrongSecret", header: signed(otherSecret, now, body), wantErr: webhook.ErrSignature},
		{name: "TamperedBody", header: signed(stripeSecret, now, body), body: []byte(strings.Replace(string(body), "evt_1", "evt_2", 1)), wantErr: webhook.ErrSignature},
		{name: "TamperedTimestamp", header: stripeHeader("t=" + strconv.FormatInt(now.Unix()+1, 10) + "," + good), wantErr: webhook.ErrSignature},
		{name: "OnlyV0", header: stripeHeader(at + ",v0=" + strings.TrimPrefix(good, "v1=")), wantErr: webhook.ErrSignature},
		{name: "StalePast", header: signed(stripeSecret, now.Add(-webhook.ToleranceDefault-time.Second), body), wantErr: webhook.ErrStale},
		{name: "StaleFuture", header: signed(stripeSecret, now.Add(webhook.ToleranceDefault+time.Second), body), wantErr: webhook.ErrStale},
		{name: "StaleCustomTolerance", verifier: webhook.Stripe{Secrets: []string{stripeSecret}, Tolerance: time.Minute}, header: signed(stripeSecret, now.Add(-2*time.Minute), body), wantErr: webhook.ErrStale},
		{name: "StaleAndWrongSecretIsSignature", header: signed(otherSecret, now.Add(-time.Hour), body), wantErr: webhook.ErrSignature},

		{name: "MissingHeader", header: http.Header{}, wantErr: webhook.ErrNoSignature},
		{name: "EmptyHeader", header: stripeHeader(""), wantErr: webhook.ErrNoSignature},
		{name: "TwoHeaders", header: stripeHeader(webhook.SignStripe(stripeSecret, now, body), webhook.SignStripe(stripeSecret, now, body)), wantErr: webhook.ErrMalformed},
		{name: "HeaderTooLong", header: stripeHeader(at + "," + good + ",x=" + strings.Repeat("a", 4096)), wantErr: webhook.ErrMalformed},
		{name: "HeaderOneByteOverTheLimit", header: stripeHeader(padTo(at+","+good+",x=", 4097)), wantErr: webhook.ErrMalformed},
		{name: "Garbage", header: stripeHeader("garbage"), wantErr: webhook.ErrMalformed},
		{name: "EmptyElement", header: stripeHeader(at + ",," + good), wantErr: webhook.ErrMalformed},
		{name: "NoTimestamp", header: stripeHeader(good), wantErr: webhook.ErrMalformed},
		{name: "TwoTimestamps", header: stripeHeader(at + "," + at + "," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampNotInteger", header: stripeHeader("t=1700000000.5," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampLetters", header: stripeHeader("t=abc," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampEmpty", header: stripeHeader("t=," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampNegative", header: stripeHeader("t=-1," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampPlusSign", header: stripeHeader("t=+" + strconv.FormatInt(now.Unix(), 10) + "," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampLeadingZero", header: stripeHeader("t=0" + strconv.FormatInt(now.Unix(), 10) + "," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampAfterYear9999", header: stripeHeader("t=999999999999," + good), wantErr: webhook.ErrMalformed},
		{name: "TimestampOverflow", header: stripeHeader("t=99999999999999999999," + good), wantErr: webhook.ErrMalformed},
		{name: "SignatureNotHex", header: stripeHeader(at + ",v1=" + strings.Repeat("zz", 32)), wantErr: webhook.ErrMalformed},
		{name: "SignatureShort", header: stripeHeader(at + ",v1=abcd"), wantErr: webhook.ErrMalformed},
		{name: "TooManySignatures", header: stripeHeader(at + strings.Repeat(","+junk, 8) + "," + good), wantErr: webhook.ErrMalformed},

		{name: "MissingEventID", header: signed(stripeSecret, now, []byte(`{"type":"charge.succeeded"}`)), body: []byte(`{"type":"charge.succeeded"}`), wantErr: webhook.ErrMalformed},
		{name: "EmptyEventID", header: signed(stripeSecret, now, []byte(`{"id":""}`)), body: []byte(`{"id":""}`), wantErr: webhook.ErrMalformed},
		{name: "EventIDNotString", header: signed(stripeSecret, now, []byte(`{"id":5}`)), body: []byte(`{"id":5}`), wantErr: webhook.ErrMalformed},
		{name: "EventIDOtherCase", header: signed(stripeSecret, now, []byte(`{"ID":"evt_1"}`)), body: []byte(`{"ID":"evt_1"}`), wantErr: webhook.ErrMalformed},
		{name: "EventIDControlCharacter", header: signed(stripeSecret, now, []byte(`{"id":"evt\u0000"}`)), body: []byte(`{"id":"evt\u0000"}`), wantErr: webhook.ErrMalformed},
		{name: "EventIDStartsWithControlCharacter", header: signed(stripeSecret, now, []byte(`{"id":"\u0001evt_1"}`)), body: []byte(`{"id":"\u0001evt_1"}`), wantErr: webhook.ErrMalformed},
		{name: "TypeNotString", header: signed(stripeSecret, now, []byte(`{"id":"evt_1","type":1}`)), body: []byte(`{"id":"evt_1","type":1}`), wantErr: webhook.ErrMalformed},
		{name: "BodyNotJSON", header: signed(stripeSecret, now, []byte(`id=evt_1`)), body: []byte(`id=evt_1`), wantErr: webhook.ErrMalformed},
		{name: "BodyNull", header: signed(stripeSecret, now, []byte(`null`)), body: []byte(`null`), wantErr: webhook.ErrMalformed},
		{name: "BodyArray", header: signed(stripeSecret, now, []byte(`[{"id":"evt_1"}]`)), body: []byte(`[{"id":"evt_1"}]`), wantErr: webhook.ErrMalformed},
		{name: "BodyEmpty", header: signed(stripeSecret, now, nil), body: []byte{}, wantErr: webhook.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			verifier := tc.verifier
			if verifier.Secrets == nil {
				verifier.Secrets = []string{stripeSecret}
			}
			b := tc.body
			if b == nil {
				b = body
			}
			got, err := verifier.Verify(tc.header, b, now)
			if tc.wantErr != nil {
				requireRefused(t, err, "Stripe", tc.wantErr, verifier.Secrets,
					[]string{v1(webhook.SignStripe(stripeSecret, now, b)), v1(webhook.SignStripe(stripeOldSecret, now, b))})
				require.Zero(t, got)
				return
			}
			require.NoError(t, err)
			// These bodies are compact, with their keys in order and no delivery metadata:
			// their Content is themselves.
			tc.want.Content = b
			require.Equal(t, tc.want, got)
		})
	}
}

// TestSignStripeKnownAnswer pins SignStripe to an HMAC computed outside Go:
//
//	printf '%s' '1614265330.{"id":"evt_1","type":"charge.succeeded"}' | openssl dgst -sha256 -hmac whsec_test_secret
//
// downstream/stripe's tests check it against stripe-go's own signer and verifier.
func TestSignStripeKnownAnswer(t *testing.T) {
	t.Parallel()

	got := webhook.SignStripe("whsec_test_secret", time.Unix(1614265330, 0), []byte(`{"id":"evt_1","type":"charge.succeeded"}`))
	require.Equal(t, "t=1614265330,v1=a77f58ed88dac6c2cb9d24f149d7424c41f234b3beb04e25d9492b330816350e", got)
}

func signStandard(t *testing.T, secret, id string, at time.Time, body []byte) http.Header {
	t.Helper()
	h, err := webhook.SignStandardWebhooks(secret, id, at, body)
	require.NoError(t, err)
	return h
}

// TestStandardWebhooksKnownAnswer reproduces the vector of the Standard Webhooks reference
// libraries (libraries/go/webhook_test.go, TestWebhookSign, in
// github.com/standard-webhooks/standard-webhooks), and verifies it.
func TestStandardWebhooksKnownAnswer(t *testing.T) {
	t.Parallel()

	ts := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	h := signStandard(t, swSecret, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body)
	require.Equal(t, http.Header{
		"Webhook-Id":        {"msg_p5jXN8AQM9LWM0D4loKWxJek"},
		"Webhook-Timestamp": {"1614265330"},
		"Webhook-Signature": {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
	}, h)

	for _, secret := range []string{swSecret, strings.TrimPrefix(swSecret, "whsec_")} {
		got, err := webhook.StandardWebhooks{Secrets: []string{secret}}.Verify(h, body, ts.Add(time.Minute))
		require.NoError(t, err)
		require.Equal(t, webhook.Delivery{ID: "msg_p5jXN8AQM9LWM0D4loKWxJek", Timestamp: ts.UTC()}, got)
	}
}

func TestStandardWebhooksVerify(t *testing.T) {
	t.Parallel()

	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	body := []byte(`{"type":"contact.created","data":{"id":"1f81eb52"}}`)
	at := strconv.FormatInt(now.Unix(), 10)
	headers := func(id, ts, sig string) http.Header {
		h := http.Header{}
		for name, v := range map[string]string{"Webhook-Id": id, "Webhook-Timestamp": ts, "Webhook-Signature": sig} {
			if v != "" {
				h.Set(name, v)
			}
		}
		return h
	}
	sigOf := func(secret string, at time.Time, body []byte) string {
		return signStandard(t, secret, id, at, body).Get("Webhook-Signature")
	}
	good := sigOf(swSecret, now, body)
	junk := "v1," + base64.StdEncoding.EncodeToString(make([]byte, 32))
	with := func(mutate func(h http.Header)) http.Header {
		h := signStandard(t, swSecret, id, now, body)
		mutate(h)
		return h
	}
	delivery := webhook.Delivery{ID: id, Type: "contact.created", Timestamp: now}

	tests := []struct {
		name     string
		verifier webhook.StandardWebhooks
		header   http.Header
		body     []byte
		want     webhook.Delivery
		wantErr  error
	}{
		{name: "Valid", header: headers(id, at, good), want: delivery},
		{name: "SecretWithoutPrefix", verifier: webhook.StandardWebhooks{Secrets: []string{strings.TrimPrefix(swSecret, "whsec_")}}, header: headers(id, at, good), want: delivery},
		{name: "RotationOldSecret", verifier: webhook.StandardWebhooks{Secrets: []string{swSecret, swOldSecret}}, header: headers(id, at, sigOf(swOldSecret, now, body)), want: delivery},
		{name: "RotationNewSecret", verifier: webhook.StandardWebhooks{Secrets: []string{swOldSecret, swSecret}}, header: headers(id, at, good), want: delivery},
		{name: "RotationBothSignaturesSent", header: headers(id, at, sigOf(swOldSecret, now, body)+" "+good), want: delivery},
		{name: "OtherVersionsIgnored", header: headers(id, at, "v1a,aGVsbG8= v2,"+strings.TrimPrefix(good, "v1,")+"  "+good), want: delivery},
		{name: "EightSignatures", header: headers(id, at, strings.Repeat(junk+" ", 7)+good), want: delivery},
		{name: "SignatureHeaderAtTheLimit", header: headers(id, at, padTo(good+" v2,", 4096)), want: delivery},
		{name: "AtTolerancePast", header: signStandard(t, swSecret, id, now.Add(-webhook.ToleranceDefault), body), want: webhook.Delivery{ID: id, Type: "contact.created", Timestamp: now.Add(-webhook.ToleranceDefault)}},
		{name: "AtToleranceFuture", header: signStandard(t, swSecret, id, now.Add(webhook.ToleranceDefault), body), want: webhook.Delivery{ID: id, Type: "contact.created", Timestamp: now.Add(webhook.ToleranceDefault)}},
		{name: "BodyNotJSON", header: headers(id, at, sigOf(swSecret, now, []byte("plain text"))), body: []byte("plain text"), want: webhook.Delivery{ID: id, Timestamp: now}},
		{name: "BodyEmpty", header: headers(id, at, sigOf(swSecret, now, nil)), body: []byte{}, want: webhook.Delivery{ID: id, Timestamp: now}},
		{name: "TypeNotString", header: headers(id, at, sigOf(swSecret, now, []byte(`{"type":7}`))), body: []byte(`{"type":7}`), want: webhook.Delivery{ID: id, Timestamp: now}},
		{name: "TypeOtherCase", header: headers(id, at, sigOf(swSecret, now, []byte(`{"Type":"x"}`))), body: []byte(`{"Type":"x"}`), want: webhook.Delivery{ID: id, Timestamp: now}},
		{name: "BodyArray", header: headers(id, at, sigOf(swSecret, now, []byte(`[{"type":"x"}]`))), body: []byte(`[{"type":"x"}]`), want: webhook.Delivery{ID: id, Timestamp: now}},

		{name: "WrongSecret", header: headers(id, at, sigOf(otherSecret, now, body)), wantErr: webhook.ErrSignature},
		{name: "TamperedBody", header: headers(id, at, good), body: []byte(strings.Replace(string(body), "contact", "Contact", 1)), wantErr: webhook.ErrSignature},
		{name: "TamperedTimestamp", header: headers(id, strconv.FormatInt(now.Unix()+1, 10), good), wantErr: webhook.ErrSignature},
		{name: "TamperedID", header: headers(id+"x", at, good), wantErr: webhook.ErrSignature},
		{name: "OnlyOtherVersions", header: headers(id, at, "v1a,"+strings.TrimPrefix(good, "v1,")), wantErr: webhook.ErrSignature},
		{name: "StalePast", header: signStandard(t, swSecret, id, now.Add(-webhook.ToleranceDefault-time.Second), body), wantErr: webhook.ErrStale},
		{name: "StaleFuture", header: signStandard(t, swSecret, id, now.Add(webhook.ToleranceDefault+time.Second), body), wantErr: webhook.ErrStale},
		{name: "StaleCustomTolerance", verifier: webhook.StandardWebhooks{Secrets: []string{swSecret}, Tolerance: time.Minute}, header: signStandard(t, swSecret, id, now.Add(2*time.Minute), body), wantErr: webhook.ErrStale},
		{name: "StaleAndWrongSecretIsSignature", header: signStandard(t, otherSecret, id, now.Add(-time.Hour), body), wantErr: webhook.ErrSignature},

		{name: "MissingAllHeaders", header: http.Header{}, wantErr: webhook.ErrNoSignature},
		{name: "MissingSignature", header: headers(id, at, ""), wantErr: webhook.ErrNoSignature},
		{name: "MissingID", header: headers("", at, good), wantErr: webhook.ErrMalformed},
		{name: "MissingTimestamp", header: headers(id, "", good), wantErr: webhook.ErrMalformed},
		{name: "TwoSignatureHeaders", header: with(func(h http.Header) { h.Add("Webhook-Signature", good) }), wantErr: webhook.ErrMalformed},
		{name: "TwoIDs", header: with(func(h http.Header) { h.Add("Webhook-Id", "msg_other") }), wantErr: webhook.ErrMalformed},
		{name: "SignatureHeaderTooLong", header: headers(id, at, good+" v2,"+strings.Repeat("a", 4096)), wantErr: webhook.ErrMalformed},
		{name: "SignatureHeaderOneByteOverTheLimit", header: headers(id, at, padTo(good+" v2,", 4097)), wantErr: webhook.ErrMalformed},
		{name: "IDTooLong", header: headers(strings.Repeat("m", 4097), at, good), wantErr: webhook.ErrMalformed},
		{name: "IDControlCharacter", header: headers("msg\x01", at, good), wantErr: webhook.ErrMalformed},
		{name: "IDStartsWithControlCharacter", header: headers("\x01msg", at, good), wantErr: webhook.ErrMalformed},
		{name: "IDInvalidUTF8", header: headers("msg\xff", at, good), wantErr: webhook.ErrMalformed},
		{name: "TimestampNotInteger", header: headers(id, at+".0", good), wantErr: webhook.ErrMalformed},
		{name: "TimestampMilliseconds", header: headers(id, at+"000", good), wantErr: webhook.ErrMalformed},
		{name: "TimestampNegative", header: headers(id, "-"+at, good), wantErr: webhook.ErrMalformed},
		{name: "TimestampPlusSign", header: headers(id, "+"+at, good), wantErr: webhook.ErrMalformed},
		{name: "TimestampLeadingZero", header: headers(id, "0"+at, good), wantErr: webhook.ErrMalformed},
		{name: "TimestampSpace", header: headers(id, " "+at, good), wantErr: webhook.ErrMalformed},
		{name: "TimestampRFC3339", header: headers(id, now.Format(time.RFC3339), good), wantErr: webhook.ErrMalformed},
		{name: "EntryWithoutComma", header: headers(id, at, "v1"), wantErr: webhook.ErrMalformed},
		{name: "SignatureNotBase64", header: headers(id, at, "v1,!!!!"), wantErr: webhook.ErrMalformed},
		{name: "SignatureURLBase64", header: headers(id, at, "v1,"+base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 32))), wantErr: webhook.ErrMalformed},
		{name: "SignatureShort", header: headers(id, at, "v1,aGVsbG8="), wantErr: webhook.ErrMalformed},
		{name: "TooManySignatures", header: headers(id, at, strings.Repeat(junk+" ", 8)+good), wantErr: webhook.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			verifier := tc.verifier
			if verifier.Secrets == nil {
				verifier.Secrets = []string{swSecret}
			}
			b := tc.body
			if b == nil {
				b = body
			}
			got, err := verifier.Verify(tc.header, b, now)
			if tc.wantErr != nil {
				var expected []string
				for _, s := range []string{swSecret, swOldSecret} {
					expected = append(expected, strings.TrimPrefix(sigOf(s, now, b), "v1,"), strings.TrimPrefix(s, "whsec_"))
				}
				requireRefused(t, err, "Standard Webhooks", tc.wantErr, verifier.Secrets, expected)
				require.Zero(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()

	type validator interface {
		webhook.Verifier
		Validate() error
	}
	tests := []struct {
		name    string
		v       validator
		wantErr string // "" for valid
	}{
		{name: "StripeValid", v: webhook.Stripe{Secrets: []string{stripeSecret}}},
		{name: "StripeRotation", v: webhook.Stripe{Secrets: []string{stripeSecret, stripeOldSecret}, Tolerance: time.Minute}},
		{name: "StripeAnyBytes", v: webhook.Stripe{Secrets: []string{"not base64 at all!"}}},
		{name: "StripeZero", v: webhook.Stripe{}, wantErr: "webhook.Stripe: Secrets is empty"},
		{name: "StripeEmptySecret", v: webhook.Stripe{Secrets: []string{stripeSecret, ""}}, wantErr: "webhook.Stripe: Secrets[1] is empty"},
		{name: "StripeSecretNewline", v: webhook.Stripe{Secrets: []string{stripeSecret + "\n"}}, wantErr: "webhook.Stripe: Secrets[0] has white space around it"},
		{name: "StripeNegativeTolerance", v: webhook.Stripe{Secrets: []string{stripeSecret}, Tolerance: -time.Second}, wantErr: "webhook.Stripe: Tolerance -1s cannot be less than zero"},
		{name: "StandardValid", v: webhook.StandardWebhooks{Secrets: []string{swSecret}}},
		{name: "StandardWithoutPrefix", v: webhook.StandardWebhooks{Secrets: []string{strings.TrimPrefix(swSecret, "whsec_")}}},
		{name: "StandardZero", v: webhook.StandardWebhooks{}, wantErr: "webhook.StandardWebhooks: Secrets and PublicKeys are empty"},
		{name: "StandardEmptySecret", v: webhook.StandardWebhooks{Secrets: []string{""}}, wantErr: "webhook.StandardWebhooks: Secrets[0] is empty"},
		{name: "StandardPrefixOnly", v: webhook.StandardWebhooks{Secrets: []string{"whsec_"}}, wantErr: "webhook.StandardWebhooks: Secrets[0] holds no key bytes"},
		{name: "StandardNotBase64", v: webhook.StandardWebhooks{Secrets: []string{swSecret, "whsec_not*base64"}}, wantErr: "webhook.StandardWebhooks: Secrets[1] is not base64"},
		{name: "StandardAsymmetric", v: webhook.StandardWebhooks{Secrets: []string{"whpk_" + strings.TrimPrefix(swSecret, "whsec_")}}, wantErr: "webhook.StandardWebhooks: Secrets[0] is an asymmetric (ed25519) key"},
		{name: "StandardNegativeTolerance", v: webhook.StandardWebhooks{Secrets: []string{swSecret}, Tolerance: -time.Minute}, wantErr: "webhook.StandardWebhooks: Tolerance -1m0s cannot be less than zero"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			err := tc.v.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			for _, s := range []string{"not*base64", strings.TrimPrefix(swSecret, "whsec_"), stripeSecret} {
				require.NotContains(t, err.Error(), s, "the message leaks a secret")
			}
			// Verify refuses to run on an invalid configuration, with Validate's error.
			_, verr := tc.v.Verify(http.Header{}, nil, now)
			require.EqualError(t, verr, err.Error())
		})
	}

	t.Run("EveryProblemAtOnce", func(t *testing.T) {
		t.Parallel()

		err := webhook.StandardWebhooks{Secrets: []string{"", "whsec_%"}, Tolerance: -1}.Validate()
		require.ErrorContains(t, err, "Secrets[0] is empty")
		require.ErrorContains(t, err, "Secrets[1] is not base64")
		require.ErrorContains(t, err, "Tolerance -1ns cannot be less than zero")
	})
}

func TestSignStandardWebhooksRefuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, secret, id string
		at               time.Time
		wantErr          string
	}{
		{name: "SecretNotBase64", secret: "whsec_%%%", id: "msg_1", at: now, wantErr: "secret is not base64"},
		{name: "EmptyID", secret: swSecret, id: "", at: now, wantErr: "id is empty"},
		{name: "IDWithDot", secret: swSecret, id: "msg.1", at: now, wantErr: "contains '.'"},
		{name: "IDControlCharacter", secret: swSecret, id: "msg\n1", at: now, wantErr: "is not printable UTF-8"},
		{name: "Before1970", secret: swSecret, id: "msg_1", at: time.Unix(-1, 0), wantErr: "is before 1970"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			h, err := webhook.SignStandardWebhooks(tc.secret, tc.id, tc.at, []byte("{}"))
			require.ErrorContains(t, err, tc.wantErr)
			require.Nil(t, h)
		})
	}
}

// fuzzSecret is what the fuzz tests verify with; the fuzzer is never told it.
const fuzzSecret = "whsec_ZnV6ei1zZWNyZXQtbmV2ZXItaW4tdGhlLWNvcnB1cw=="

// requireFuzzRefused checks what every refusal of a forged delivery must be.
func requireFuzzRefused(t *testing.T, err error, scheme string) {
	t.Helper()
	require.Error(t, err, "verified without the secret")
	verr, ok := errors.AsType[*webhook.VerifyError](err)
	require.True(t, ok, "want a *webhook.VerifyError, got %T: %v", err, err)
	require.Equal(t, scheme, verr.Scheme)
	require.Contains(t, sentinels, verr.Reason)
	require.NotContains(t, err.Error(), fuzzSecret)
	require.NotContains(t, err.Error(), strings.TrimPrefix(fuzzSecret, "whsec_"))
}

// FuzzStripeHeader: an arbitrary header and body never panic and never verify without the
// secret; signed with it at the verifier's clock, they verify unless the body is not an event.
func FuzzStripeHeader(f *testing.F) {
	ts := strconv.FormatInt(now.Unix(), 10)
	f.Add("t="+ts+",v1="+strings.Repeat("0", 64), []byte(`{"id":"evt_1","type":"x"}`), now.Unix())
	f.Add(webhook.SignStripe("whsec_guess", now, []byte(`{"id":"evt_1"}`)), []byte(`{"id":"evt_1"}`), now.Unix())
	f.Add("t="+ts+",v1=zz,v0=00,,=,t=", []byte("null"), int64(0))
	f.Add("t=-9223372036854775808,v1=", []byte{}, int64(-1))
	f.Add(strings.Repeat("v1=00,", 20), []byte(`[]`), now.Unix())
	verifier := webhook.Stripe{Secrets: []string{fuzzSecret}}

	f.Fuzz(func(t *testing.T, header string, body []byte, unix int64) {
		clock := time.Unix(unix, 0)
		_, err := verifier.Verify(stripeHeader(header), body, clock)
		requireFuzzRefused(t, err, "Stripe")

		if unix < 0 || unix > 253402300799 {
			return // SignStripe's t would not be a timestamp Verify reads
		}
		got, err := verifier.Verify(stripeHeader(webhook.SignStripe(fuzzSecret, clock, body)), body, clock)
		if err != nil {
			require.ErrorIs(t, err, webhook.ErrMalformed)
			return
		}
		require.NotEmpty(t, got.ID)
		require.Equal(t, clock.UTC(), got.Timestamp)
	})
}

// FuzzStandardWebhooks: arbitrary headers and body never panic and never verify without the
// secret; signed with it, they verify.
func FuzzStandardWebhooks(f *testing.F) {
	ts := strconv.FormatInt(now.Unix(), 10)
	f.Add("msg_1", ts, "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32)), []byte(`{"type":"x"}`))
	f.Add("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", []byte(`{"test": 2432232314}`))
	f.Add("", "", "", []byte(nil))
	f.Add("a.b", "-1", "v1 v1, ,v1 v1a,xx", []byte("not json"))
	f.Add("msg", "99999999999999999999", strings.Repeat("v1,AAAA ", 20), []byte(`null`))
	verifier := webhook.StandardWebhooks{Secrets: []string{fuzzSecret}}

	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig}}
		_, err := verifier.Verify(h, body, now)
		requireFuzzRefused(t, err, "Standard Webhooks")

		signed, err := webhook.SignStandardWebhooks(fuzzSecret, id, now, body)
		if err != nil {
			return // an ID the specification forbids
		}
		got, err := verifier.Verify(signed, body, now)
		if len(id) > 4096 {
			require.ErrorIs(t, err, webhook.ErrMalformed)
			return
		}
		require.NoError(t, err)
		require.Equal(t, id, got.ID)
		require.Equal(t, now, got.Timestamp)
	})
}
