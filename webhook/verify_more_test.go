package webhook_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/webhook"
)

// These signers are written here from the providers' documents, apart from the package's code, so
// that a verifier agreeing with its own signer cannot pass for one agreeing with the scheme.

// ghSecret is a GitHub webhook secret: any text, used as raw bytes.
const ghSecret = "It's a Secret to Everybody"

// signGitHub returns GitHub's headers for a delivery of body: X-Hub-Signature-256 is
// "sha256=" and the hex HMAC-SHA256 of the body, keyed with the secret's bytes.
func signGitHub(_ *testing.T, secret, id string, _ time.Time, body []byte) http.Header {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	h.Set("X-GitHub-Delivery", id)
	h.Set("X-GitHub-Event", "payment_intent.succeeded")
	return h
}

// edKey is the ed25519 key pair the tests derive from a name: the handler tests' schemes pass
// secrets around as strings.
func edKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// whpk is the Standard Webhooks serialisation of key's public half.
func whpk(key ed25519.PrivateKey) string {
	return "whpk_" + base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
}

// publicKeys returns the whpk_ keys of the key pairs named by names.
func publicKeys(names ...string) []string {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = whpk(edKey(n))
	}
	return keys
}

// signV1a returns the Standard Webhooks headers of body signed with ed25519 (v1a) by the key
// pair named name: the signature covers "<id>.<timestamp>.<body>".
func signV1a(_ *testing.T, name, id string, at time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := ed25519.Sign(edKey(name), []byte(id+"."+ts+"."+string(body)))
	h := http.Header{}
	h.Set("Webhook-Id", id)
	h.Set("Webhook-Timestamp", ts)
	h.Set("Webhook-Signature", "v1a,"+base64.StdEncoding.EncodeToString(sig))
	return h
}

// signV1 is signStandard's scheme written out: a v1 HMAC-SHA256 keyed with the decoded secret.
func signV1(key []byte, id, ts string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// verifyCase is a row of a verifier's table test: verifier nil means the test's default, body
// nil the test's body; wantErr nil means the delivery is accepted as want.
type verifyCase struct {
	name     string
	verifier webhook.Verifier
	header   http.Header
	body     []byte
	want     webhook.Delivery
	wantErr  error
}

// runVerifyCases runs cases in parallel subtests; a refusal must be a *VerifyError of scheme
// with the wanted reason alone, and its message must not hold any of secrets.
func runVerifyCases(t *testing.T, scheme string, verifier webhook.Verifier, body []byte, secrets []string, cases []verifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := tc.verifier
			if v == nil {
				v = verifier
			}
			b := tc.body
			if b == nil {
				b = body
			}
			got, err := v.Verify(tc.header, b, now)
			if tc.wantErr != nil {
				requireRefused(t, err, scheme, tc.wantErr, secrets, nil)
				require.Zero(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestGitHubVerify(t *testing.T) {
	t.Parallel()

	const id = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	body := []byte(`{"action":"opened","number":7}`)
	good := signGitHub(t, ghSecret, id, now, body)
	with := func(mutate func(h http.Header)) http.Header {
		h := good.Clone()
		mutate(h)
		return h
	}
	delivery := webhook.Delivery{ID: id, Type: "payment_intent.succeeded"}

	runVerifyCases(t, "GitHub", webhook.GitHub{Secrets: []string{ghSecret}}, body, []string{ghSecret}, []verifyCase{
		{name: "Valid", header: good, want: delivery},
		// GitHub's own test vector: secret and payload from its documentation on validating
		// webhook deliveries.
		{name: "GitHubDocumentedVector", header: http.Header{
			"X-Hub-Signature-256": {"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"},
			"X-Github-Delivery":   {id},
		}, body: []byte("Hello, World!"), want: webhook.Delivery{ID: id}},
		{name: "RotationOldSecret", verifier: webhook.GitHub{Secrets: []string{"new", ghSecret}}, header: good, want: delivery},
		{name: "NoEventType", header: with(func(h http.Header) { h.Del("X-GitHub-Event") }), want: webhook.Delivery{ID: id}},
		{name: "EventTypeUnprintable", header: with(func(h http.Header) { h.Set("X-GitHub-Event", "push\x01") }), want: webhook.Delivery{ID: id}},
		{name: "OldTimestampIrrelevant", header: signGitHub(t, ghSecret, id, now.Add(-48*time.Hour), body), want: delivery},

		{name: "WrongSecret", header: signGitHub(t, "another secret", id, now, body), wantErr: webhook.ErrSignature},
		{name: "TamperedBody", header: good, body: []byte(`{"action":"closed","number":7}`), wantErr: webhook.ErrSignature},
		{name: "MissingAllHeaders", header: http.Header{}, wantErr: webhook.ErrNoSignature},
		{name: "WrongSchemeStripe", header: stripeHeader(webhook.SignStripe(ghSecret, now, body)), wantErr: webhook.ErrNoSignature},
		{name: "WrongSchemeSHA1", header: with(func(h http.Header) {
			h.Del("X-Hub-Signature-256")
			h.Set("X-Hub-Signature", "sha1=0000000000000000000000000000000000000000")
		}), wantErr: webhook.ErrNoSignature},
		{name: "WrongAlgorithmPrefix", header: with(func(h http.Header) {
			h.Set("X-Hub-Signature-256", "sha1="+strings.TrimPrefix(good.Get("X-Hub-Signature-256"), "sha256="))
		}), wantErr: webhook.ErrMalformed},
		{name: "SignatureNotHex", header: with(func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("z", 64)) }), wantErr: webhook.ErrMalformed},
		{name: "SignatureShort", header: with(func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256=abcd") }), wantErr: webhook.ErrMalformed},
		{name: "TwoSignatures", header: with(func(h http.Header) { h.Add("X-Hub-Signature-256", h.Get("X-Hub-Signature-256")) }), wantErr: webhook.ErrMalformed},
		{name: "SignatureTooLong", header: with(func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("a", 4096)) }), wantErr: webhook.ErrMalformed},
		{name: "MissingDelivery", header: with(func(h http.Header) { h.Del("X-GitHub-Delivery") }), wantErr: webhook.ErrMalformed},
		{name: "TwoDeliveries", header: with(func(h http.Header) { h.Add("X-GitHub-Delivery", "other") }), wantErr: webhook.ErrMalformed},
		{name: "DeliveryUnprintable", header: with(func(h http.Header) { h.Set("X-GitHub-Delivery", "id\x7f") }), wantErr: webhook.ErrMalformed},
	})
}

func TestStandardWebhooksV1a(t *testing.T) {
	t.Parallel()

	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	body := []byte(`{"type":"contact.created"}`)
	at := strconv.FormatInt(now.Unix(), 10)
	good := signV1a(t, "provider", id, now, body)
	sig := good.Get("Webhook-Signature")
	with := func(value string) http.Header {
		h := good.Clone()
		h.Set("Webhook-Signature", value)
		return h
	}
	delivery := webhook.Delivery{ID: id, Type: "contact.created", Timestamp: now}
	hmacSig := signV1(mustDecode(t, swSecret), id, at, body)
	junk := "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))

	runVerifyCases(t, "Standard Webhooks", webhook.StandardWebhooks{PublicKeys: publicKeys("provider")}, body, nil, []verifyCase{
		{name: "Valid", header: good, want: delivery},
		{name: "KeyWithoutPrefix", verifier: webhook.StandardWebhooks{PublicKeys: []string{strings.TrimPrefix(whpk(edKey("provider")), "whpk_")}}, header: good, want: delivery},
		{name: "RotationOldKey", verifier: webhook.StandardWebhooks{PublicKeys: publicKeys("new", "provider")}, header: good, want: delivery},
		{name: "BothSchemesSentV1aMatches", verifier: webhook.StandardWebhooks{Secrets: []string{otherSecret}, PublicKeys: publicKeys("provider")}, header: with(sig + " " + hmacSig), want: delivery},
		{name: "BothSchemesSentV1Matches", verifier: webhook.StandardWebhooks{Secrets: []string{swSecret}, PublicKeys: publicKeys("other")}, header: with(sig + " " + hmacSig), want: delivery},
		{name: "EightSignatures", header: with(strings.Repeat(junk+" ", 7) + sig), want: delivery},

		{name: "WrongKey", verifier: webhook.StandardWebhooks{PublicKeys: publicKeys("other")}, header: good, wantErr: webhook.ErrSignature},
		{name: "TamperedBody", header: good, body: []byte(`{"type":"contact.deleted"}`), wantErr: webhook.ErrSignature},
		{name: "TamperedID", header: func() http.Header { h := good.Clone(); h.Set("Webhook-Id", id+"x"); return h }(), wantErr: webhook.ErrSignature},
		{name: "TamperedTimestamp", header: func() http.Header {
			h := good.Clone()
			h.Set("Webhook-Timestamp", strconv.FormatInt(now.Unix()+1, 10))
			return h
		}(), wantErr: webhook.ErrSignature},
		{name: "ReplayedPast", header: signV1a(t, "provider", id, now.Add(-webhook.ToleranceDefault-time.Second), body), wantErr: webhook.ErrStale},
		{name: "ReplayedFuture", header: signV1a(t, "provider", id, now.Add(webhook.ToleranceDefault+time.Second), body), wantErr: webhook.ErrStale},
		{name: "V1OnlyWithoutSecrets", header: with(hmacSig), wantErr: webhook.ErrSignature},
		{name: "V1aOnlyWithoutPublicKeys", verifier: webhook.StandardWebhooks{Secrets: []string{swSecret}}, header: good, wantErr: webhook.ErrSignature},
		{name: "MissingSignature", header: func() http.Header { h := good.Clone(); h.Del("Webhook-Signature"); return h }(), wantErr: webhook.ErrNoSignature},
		{name: "SignatureNotBase64", header: with("v1a,!!!!"), wantErr: webhook.ErrMalformed},
		{name: "SignatureShort", header: with("v1a," + base64.StdEncoding.EncodeToString(make([]byte, 32))), wantErr: webhook.ErrMalformed},
		{name: "TooManySignatures", header: with(strings.Repeat(junk+" ", 8) + sig), wantErr: webhook.ErrMalformed},
		{name: "IDWithDot", header: signV1a(t, "provider", "msg.1", now, body), wantErr: webhook.ErrMalformed},
	})
}

// A webhook-id with '.' is refused even when correctly signed, as the specification asks: the
// content signed for ID "evt.1700000000", timestamp T and body B is also the content of ID "evt",
// timestamp 1700000000 and body "T.B", a delivery the sender never signed.
func TestStandardWebhooksRefusesIDWithDot(t *testing.T) {
	t.Parallel()
	body := []byte(`{}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	h := http.Header{}
	h.Set("Webhook-Id", "evt.1")
	h.Set("Webhook-Timestamp", ts)
	h.Set("Webhook-Signature", signV1(mustDecode(t, swSecret), "evt.1", ts, body))
	_, err := webhook.StandardWebhooks{Secrets: []string{swSecret}}.Verify(h, body, now)
	requireRefused(t, err, "Standard Webhooks", webhook.ErrMalformed, []string{swSecret}, nil)
	require.ErrorContains(t, err, "'.'")
}

func TestValidatePublicKeysAndGitHub(t *testing.T) {
	t.Parallel()
	pk := whpk(edKey("provider"))
	for _, tc := range []struct {
		name    string
		err     error
		wantErr string
	}{
		{name: "PublicKeyOnly", err: webhook.StandardWebhooks{PublicKeys: []string{pk}}.Validate()},
		{name: "Both", err: webhook.StandardWebhooks{Secrets: []string{swSecret}, PublicKeys: []string{pk}}.Validate()},
		{name: "PublicKeyShort", err: webhook.StandardWebhooks{PublicKeys: []string{"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31))}}.Validate(), wantErr: "webhook.StandardWebhooks: PublicKeys[0] holds 31 key bytes"},
		{name: "PublicKeyNotBase64", err: webhook.StandardWebhooks{PublicKeys: []string{pk, "whpk_%%"}}.Validate(), wantErr: "webhook.StandardWebhooks: PublicKeys[1] is not base64"},
		{name: "PrivateKeyGiven", err: webhook.StandardWebhooks{PublicKeys: []string{"whsk_" + base64.StdEncoding.EncodeToString(edKey("provider").Seed())}}.Validate(), wantErr: "PublicKeys[0] is a secret key"},
		{name: "SymmetricSecretAsPublicKey", err: webhook.StandardWebhooks{PublicKeys: []string{swSecret}}.Validate(), wantErr: "PublicKeys[0] is a secret key"},
		{name: "PublicKeyEmpty", err: webhook.StandardWebhooks{PublicKeys: []string{""}}.Validate(), wantErr: "PublicKeys[0] is empty"},
		{name: "PublicKeyAsSecret", err: webhook.StandardWebhooks{Secrets: []string{pk}}.Validate(), wantErr: "put the provider's public key (whpk_…) in PublicKeys"},
		{name: "GitHubValid", err: webhook.GitHub{Secrets: []string{ghSecret}}.Validate()},
		{name: "GitHubZero", err: webhook.GitHub{}.Validate(), wantErr: "webhook.GitHub: Secrets is empty"},
		{name: "GitHubNewline", err: webhook.GitHub{Secrets: []string{ghSecret + "\n"}}.Validate(), wantErr: "webhook.GitHub: Secrets[0] has white space around it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.wantErr == "" {
				require.NoError(t, tc.err)
				return
			}
			require.ErrorContains(t, tc.err, tc.wantErr)
			require.NotContains(t, tc.err.Error(), ghSecret, "the message leaks a secret")
		})
	}
	// A malformed signature's refusal says what a good one looks like.
	_, err := webhook.GitHub{Secrets: []string{ghSecret}}.Verify(http.Header{"X-Hub-Signature-256": {"sha256=abc"}}, nil, now)
	require.ErrorContains(t, err, "sha256= and 64 hex digits")

	_, err = webhook.GitHub{}.Verify(http.Header{}, nil, now)
	require.ErrorContains(t, err, "webhook.GitHub: Secrets is empty", "Verify ran on an invalid configuration")
}

func mustDecode(t *testing.T, secret string) []byte {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	return key
}

// propertyRand returns a seeded generator, the seed logged to replay a failure.
func propertyRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randomDeliveryID is printable, has no '.', and no space at either end.
func randomDeliveryID(rng *rand.Rand) string {
	runes := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-/:\"=+é€")
	var b strings.Builder
	for range 1 + rng.IntN(60) {
		b.WriteRune(runes[rng.IntN(len(runes))])
	}
	return b.String()
}

// flip changes one byte of b (b must not be empty).
func flip(rng *rand.Rand, b []byte) []byte {
	c := append([]byte(nil), b...)
	c[rng.IntN(len(c))] ^= byte(1 + rng.IntN(255))
	return c
}

// refusedNotStale: a change to signed bytes is refused as forged or malformed, never accepted
// and never reported as merely stale.
func refusedNotStale(t *testing.T, err error, what string, i int) {
	t.Helper()
	require.Error(t, err, "case %d: a changed %s verified", i, what)
	require.True(t, errors.Is(err, webhook.ErrSignature) || errors.Is(err, webhook.ErrMalformed), "case %d, changed %s: %v", i, what, err)
}

// Every delivery signed by the spec-written signers above verifies; a change of one byte of the
// body, the ID or the timestamp is refused. Random secrets, keys, IDs, timestamps and bodies.
func TestStandardWebhooksProperty(t *testing.T) {
	t.Parallel()
	rng := propertyRand(t)
	for i := range 300 {
		secret := randomBytes(rng, 24+rng.IntN(41))
		key := ed25519.NewKeyFromSeed(randomBytes(rng, ed25519.SeedSize))
		id := randomDeliveryID(rng)
		at := time.Unix(rng.Int64N(253402300800), 0).UTC()
		ts := strconv.FormatInt(at.Unix(), 10)
		body := randomBytes(rng, 1+rng.IntN(2048))
		v1a := "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(key, []byte(id+"."+ts+"."+string(body))))

		for _, tc := range []struct {
			v   webhook.StandardWebhooks
			sig string
		}{
			{webhook.StandardWebhooks{Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString(secret)}}, signV1(secret, id, ts, body)},
			{webhook.StandardWebhooks{PublicKeys: []string{whpk(key)}}, v1a},
		} {
			h := http.Header{}
			h.Set("Webhook-Id", id)
			h.Set("Webhook-Timestamp", ts)
			h.Set("Webhook-Signature", tc.sig)
			d, err := tc.v.Verify(h, body, at)
			require.NoError(t, err, "case %d (%s): a signed delivery did not verify", i, tc.sig[:3])
			require.Equal(t, id, d.ID)
			require.Equal(t, at, d.Timestamp)

			_, err = tc.v.Verify(h, flip(rng, body), at)
			refusedNotStale(t, err, "body", i)

			m := h.Clone()
			m.Set("Webhook-Id", string(flip(rng, []byte(id))))
			_, err = tc.v.Verify(m, body, at)
			refusedNotStale(t, err, "ID", i)

			m = h.Clone()
			tsb := []byte(ts)
			k := rng.IntN(len(tsb))
			d0 := tsb[k]
			for tsb[k] == d0 {
				tsb[k] = byte('0' + rng.IntN(10))
			}
			m.Set("Webhook-Timestamp", string(tsb))
			_, err = tc.v.Verify(m, body, at)
			refusedNotStale(t, err, "timestamp", i)
		}
	}
}

// Every body signed as GitHub documents verifies, and a change of one byte of it, or of the
// signature, is refused.
func TestGitHubProperty(t *testing.T) {
	t.Parallel()
	rng := propertyRand(t)
	for i := range 300 {
		secret := string(randomBytes(rng, 1+rng.IntN(64)))
		secret = strings.TrimSpace(strings.ToValidUTF8(secret, "x"))
		if secret == "" {
			secret = "s"
		}
		id := randomDeliveryID(rng)
		body := randomBytes(rng, 1+rng.IntN(2048))
		h := signGitHub(t, secret, id, now, body)
		v := webhook.GitHub{Secrets: []string{secret}}
		d, err := v.Verify(h, body, now)
		require.NoError(t, err, "case %d: a signed delivery did not verify", i)
		require.Equal(t, id, d.ID)

		_, err = v.Verify(h, flip(rng, body), now)
		require.ErrorIs(t, err, webhook.ErrSignature, "case %d: a changed body verified", i)

		m := h.Clone()
		sig := []byte(strings.TrimPrefix(h.Get("X-Hub-Signature-256"), "sha256="))
		k := rng.IntN(len(sig))
		c := sig[k]
		for sig[k] == c {
			sig[k] = "0123456789abcdef"[rng.IntN(16)]
		}
		m.Set("X-Hub-Signature-256", "sha256="+string(sig))
		_, err = v.Verify(m, body, now)
		require.ErrorIs(t, err, webhook.ErrSignature, "case %d: a changed signature verified", i)
	}
}
