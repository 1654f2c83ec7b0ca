package webhook

import (
	"cmp"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Verifier checks a delivery's signature over the exact bytes received, before anything else is
// read from it, and returns what the intake needs to deduplicate it.
//
// Every error it returns for a delivery is a *VerifyError whose Reason is ErrNoSignature,
// ErrMalformed, ErrStale or ErrSignature. Stripe and StandardWebhooks check the signature before
// the timestamp's freshness, so ErrStale is only ever reported for a correctly signed delivery:
// it means a replay, a long-delayed delivery or a wrong clock, never a forgery. GitHub signs no
// timestamp, and never reports ErrStale.
type Verifier interface {
	Verify(header http.Header, body []byte, now time.Time) (Delivery, error)
}

// Delivery is a verified delivery.
type Delivery struct {
	// ID is the provider's event or delivery ID: the deduplication key. It is never empty, and
	// is valid UTF-8 free of control characters.
	ID string
	// Type is the event type, "" when the scheme does not carry one.
	Type string
	// Timestamp is the signed timestamp, in UTC, to the second; zero for a scheme that signs
	// none (GitHub).
	Timestamp time.Time
	// Content is what a redelivery under ID must repeat to be a duplicate (answered 200, stored
	// once) rather than a conflict (409): nil means the whole body. Stripe sets it to the body
	// without the event's delivery metadata (see Stripe); a verifier of the caller's own may set
	// it the same way. Only the body is ever stored and handed on.
	Content []byte
}

// ToleranceDefault is how far a signed timestamp may be from now, into the past or the future,
// when Tolerance is zero. It is the window Stripe's and the Standard Webhooks reference libraries
// use.
const ToleranceDefault = 5 * time.Minute

// Limits on the work one delivery can cause before its signature is known to be good.
const (
	// maxHeaderBytes bounds each signature header's value; a larger one is ErrMalformed.
	maxHeaderBytes = 4 << 10
	// maxSignatures bounds the signatures of each version (v1, v1a) one header may carry; more
	// is ErrMalformed. A provider sends one, or two while a secret is rotated.
	maxSignatures = 8
	// maxUnix is 9999-12-31T23:59:59Z: a later timestamp is not a clock, it is garbage.
	maxUnix = 253402300799
)

// The reasons of a *VerifyError. Each is matched with errors.Is.
var (
	// ErrNoSignature: the delivery carries no signature header (Stripe-Signature, or
	// webhook-signature). It was not sent by the provider, or not with this scheme.
	ErrNoSignature = errors.New("webhook signature header missing")
	// ErrMalformed: a signature header or, once the signature has passed, the body cannot be
	// parsed, or the delivery has no event ID.
	ErrMalformed = errors.New("malformed webhook delivery")
	// ErrStale: the delivery is correctly signed, but its signed timestamp is further from now
	// than the tolerance: a replay, a delivery held too long on the way, or a wrong clock.
	ErrStale = errors.New("webhook timestamp outside tolerance")
	// ErrSignature: no signature in the header matches the body under any of the secrets.
	ErrSignature = errors.New("webhook signature does not match")
)

// Scheme names, as VerifyError.Scheme spells them.
const (
	schemeStripe           = "Stripe"
	schemeStandardWebhooks = "Standard Webhooks"
	schemeGitHub           = "GitHub"
)

// Header names. http.Header's methods canonicalise them ("webhook-id" is "Webhook-Id").
const (
	headerStripeSignature = "Stripe-Signature"
	headerWebhookID       = "Webhook-Id"
	headerWebhookTime     = "Webhook-Timestamp"
	headerWebhookSig      = "Webhook-Signature"
	headerGitHubSignature = "X-Hub-Signature-256"
	headerGitHubDelivery  = "X-Github-Delivery"
	headerGitHubEvent     = "X-Github-Event"
)

// VerifyError is why a delivery was refused. Its message is safe to log and to send back to the
// sender: it never holds a secret or the signature that was expected.
type VerifyError struct {
	// Scheme is "Stripe", "Standard Webhooks" or "GitHub".
	Scheme string
	// Reason is ErrNoSignature, ErrMalformed, ErrStale or ErrSignature.
	Reason error
	// Detail says what was wrong and what to check.
	Detail string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.Scheme, e.Reason, e.Detail)
}

// Unwrap returns Reason, so that errors.Is(err, ErrStale) and the like work.
func (e *VerifyError) Unwrap() error { return e.Reason }

// reject returns the *VerifyError of scheme for reason, its Detail formatted.
func reject(scheme string, reason error, format string, args ...any) *VerifyError {
	return &VerifyError{Scheme: scheme, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Stripe verifies Stripe's Stripe-Signature scheme: "t=<unix seconds>,v1=<hex>[,v1=<hex>…]",
// each v1 an HMAC-SHA256, keyed with the secret's bytes, of "<t>.<body>". Any v1 that matches
// any secret passes; v0 and other schemes are ignored.
//
// Verify checks, in this order: the header is there and well-formed (ErrNoSignature,
// ErrMalformed); a signature matches (ErrSignature); the timestamp is within Tolerance of now,
// in either direction (ErrStale; Stripe's library only refuses the past); and, only then, the body
// is a JSON object with a non-empty string "id", the Delivery's ID, and a "type" (ErrMalformed).
//
// A redelivery of an event whose body differs from the first only in "pending_webhooks" or
// "request" is a duplicate, not a conflict: the Delivery's Content leaves them out (see
// stripeContent for why).
//
// The zero value verifies nothing: set Secrets. Verify returns Validate's error, which is not a
// *VerifyError, when the configuration is invalid.
type Stripe struct {
	// Secrets are the endpoint's signing secrets ("whsec_…", from the endpoint's page in the
	// Stripe Dashboard, or printed by `stripe listen`), used as raw bytes as Stripe does. Give
	// the old and the new one while rotating. Required.
	Secrets []string
	// Tolerance is how far the signed timestamp may be from now; 0 means ToleranceDefault.
	Tolerance time.Duration
}

var _ Verifier = Stripe{}

// Validate reports every bad field at once: no secret, an empty secret, a secret with white
// space around it, a negative Tolerance. A handler calls it once, at construction.
func (s Stripe) Validate() error {
	return validateConfig("webhook.Stripe", s.Secrets, s.Tolerance, func(string) error { return nil })
}

// Verify implements Verifier; see Stripe for what it checks.
func (s Stripe) Verify(header http.Header, body []byte, now time.Time) (Delivery, error) {
	if err := s.Validate(); err != nil {
		return Delivery{}, err
	}
	value, err := singleHeader(schemeStripe, header, headerStripeSignature, ErrNoSignature)
	if err != nil {
		return Delivery{}, err
	}
	ts, sigs, err := parseStripeSignature(value)
	if err != nil {
		return Delivery{}, err
	}
	signed := func(secret string) []byte {
		return mac([]byte(secret), strconv.AppendInt(nil, ts, 10), []byte("."), body)
	}
	if !anyMatch(s.Secrets, signed, sigs) {
		return Delivery{}, reject(schemeStripe, ErrSignature, "no v1 signature matches the configured secrets; check that Secrets holds this endpoint's signing secret (whsec_…; `stripe listen` prints its own) and that Verify gets the body exactly as received, not decoded and re-encoded")
	}
	if err := fresh(schemeStripe, ts, now, cmp.Or(s.Tolerance, ToleranceDefault)); err != nil {
		return Delivery{}, err
	}
	fields, err := jsonObject(body)
	if err != nil {
		return Delivery{}, reject(schemeStripe, ErrMalformed, "the signed body is not a JSON object: %v", err)
	}
	var id, typ string
	if raw, ok := fields["id"]; !ok || json.Unmarshal(raw, &id) != nil || id == "" {
		return Delivery{}, reject(schemeStripe, ErrMalformed, `the signed body has no "id" string: Stripe events carry one ("evt_…"); is this endpoint receiving Stripe events?`)
	}
	if err := checkID(schemeStripe, id); err != nil {
		return Delivery{}, err
	}
	if raw, ok := fields["type"]; ok {
		if json.Unmarshal(raw, &typ) != nil {
			return Delivery{}, reject(schemeStripe, ErrMalformed, `the signed body's "type" is not a string`)
		}
	}
	content, err := stripeContent(fields)
	if err != nil {
		return Delivery{}, reject(schemeStripe, ErrMalformed, "the signed body cannot be re-encoded: %v", err)
	}
	return Delivery{ID: id, Type: typ, Timestamp: time.Unix(ts, 0).UTC(), Content: content}, nil
}

// parseStripeSignature reads "t=…,v1=…[,v1=…][,v0=…]". Elements other than t and v1 are
// ignored, as Stripe's libraries do; a v1 that is not 64 hex digits, a second t, or an element
// without '=' is ErrMalformed (Stripe's library skips a bad v1; no genuine header has one).
func parseStripeSignature(value string) (ts int64, sigs [][]byte, err error) {
	haveT := false
	for i, element := range strings.Split(value, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(element), "=")
		if !ok {
			return 0, nil, reject(schemeStripe, ErrMalformed, "Stripe-Signature element %d is not key=value; want t=<unix seconds>,v1=<hex>", i+1)
		}
		switch key {
		case "t":
			if haveT {
				return 0, nil, reject(schemeStripe, ErrMalformed, "Stripe-Signature has more than one t= element")
			}
			haveT = true
			if ts, err = parseUnix(val); err != nil {
				return 0, nil, reject(schemeStripe, ErrMalformed, "Stripe-Signature t= %v", err)
			}
		case "v1":
			if len(sigs) == maxSignatures {
				return 0, nil, reject(schemeStripe, ErrMalformed, "Stripe-Signature has more than %d v1 signatures", maxSignatures)
			}
			sig, err := hex.DecodeString(val)
			if err != nil || len(sig) != sha256.Size {
				return 0, nil, reject(schemeStripe, ErrMalformed, "Stripe-Signature v1 signature %d is not %d hex digits", len(sigs)+1, 2*sha256.Size)
			}
			sigs = append(sigs, sig)
		}
	}
	switch {
	case !haveT:
		return 0, nil, reject(schemeStripe, ErrMalformed, "Stripe-Signature has no t= timestamp")
	case len(sigs) == 0:
		return 0, nil, reject(schemeStripe, ErrSignature, "Stripe-Signature has no v1 signature; only v1 (HMAC-SHA256) is accepted")
	}
	return ts, sigs, nil
}

// StandardWebhooks verifies the Standard Webhooks scheme (https://www.standardwebhooks.com/),
// used by Svix and the providers built on it: the headers webhook-id, webhook-timestamp (unix
// seconds) and webhook-signature, a space-separated list of "v1,<base64>", each an HMAC-SHA256
// of "<id>.<timestamp>.<body>" keyed with a secret's decoded bytes, and of "v1a,<base64>", each
// an ed25519 signature of the same content. Any v1 that matches any secret passes, and so does
// any v1a that verifies under any public key; v1a entries are ignored when PublicKeys is empty,
// and other versions always.
//
// Verify checks, in this order: the headers are there and well-formed (ErrNoSignature when
// webhook-signature is missing, ErrMalformed for the rest, including a webhook-id with a '.',
// which the specification forbids: "<id>.<timestamp>.<body>" signed for one split of those bytes
// would stand for another); a signature matches (ErrSignature);
// the timestamp is within Tolerance of now, in either direction (ErrStale). The Delivery's ID is
// webhook-id; its Type is the body's "type" when the body is a JSON object with a string there,
// and "" otherwise: the scheme signs any body, JSON or not.
//
// The zero value verifies nothing: set Secrets, PublicKeys or both. Verify returns Validate's
// error, which is not a *VerifyError, when the configuration is invalid.
type StandardWebhooks struct {
	// Secrets are the endpoint's signing secrets, "whsec_<base64>" (the prefix is optional),
	// several while rotating. The specification asks providers for 24 to 64 random bytes; a
	// shorter key is accepted, as the reference libraries accept it. Required unless
	// PublicKeys is set.
	Secrets []string
	// PublicKeys are the provider's ed25519 public keys, "whpk_<base64 of the 32 key bytes>"
	// (the prefix is optional), several while rotating: they verify v1a signatures. Never the
	// provider's secret key (whsk_), which a receiver must not hold.
	PublicKeys []string
	// Tolerance is how far the signed timestamp may be from now, into the past or the future; 0
	// means ToleranceDefault.
	Tolerance time.Duration
}

var _ Verifier = StandardWebhooks{}

// Validate reports every bad field at once: neither a secret nor a public key, an empty secret
// or one that is not base64 after its "whsec_" prefix, a public key that is not 32 bytes of
// base64 after its "whpk_" prefix, a negative Tolerance. A handler calls it once, at
// construction.
func (s StandardWebhooks) Validate() error {
	const name = "webhook.StandardWebhooks"
	var errs []error
	if len(s.Secrets) == 0 && len(s.PublicKeys) == 0 {
		errs = append(errs, fmt.Errorf("%s: Secrets and PublicKeys are empty; give the endpoint's signing secret (whsec_…) or the provider's public key (whpk_…)", name))
	}
	errs = append(errs, validateSecrets(name+": Secrets", s.Secrets, func(secret string) error {
		_, err := decodeSecret(secret)
		return err
	})...)
	errs = append(errs, validateSecrets(name+": PublicKeys", s.PublicKeys, func(key string) error {
		_, err := decodePublicKey(key)
		return err
	})...)
	errs = append(errs, validateTolerance(name, s.Tolerance)...)
	return errors.Join(errs...)
}

// Verify implements Verifier; see StandardWebhooks for what it checks.
func (s StandardWebhooks) Verify(header http.Header, body []byte, now time.Time) (Delivery, error) {
	if err := s.Validate(); err != nil {
		return Delivery{}, err
	}
	sigValue, err := singleHeader(schemeStandardWebhooks, header, headerWebhookSig, ErrNoSignature)
	if err != nil {
		return Delivery{}, err
	}
	id, err := singleHeader(schemeStandardWebhooks, header, headerWebhookID, ErrMalformed)
	if err != nil {
		return Delivery{}, err
	}
	if err := checkID(schemeStandardWebhooks, id); err != nil {
		return Delivery{}, err
	}
	if strings.Contains(id, ".") {
		return Delivery{}, reject(schemeStandardWebhooks, ErrMalformed, "webhook-id contains '.', which the specification forbids: the signed content \"<id>.<timestamp>.<body>\" would not tell where the ID ends")
	}
	tsValue, err := singleHeader(schemeStandardWebhooks, header, headerWebhookTime, ErrMalformed)
	if err != nil {
		return Delivery{}, err
	}
	ts, err := parseUnix(tsValue)
	if err != nil {
		return Delivery{}, reject(schemeStandardWebhooks, ErrMalformed, "webhook-timestamp %v", err)
	}
	sigs, asigs, err := parseStandardSignatures(sigValue, len(s.PublicKeys) > 0)
	if err != nil {
		return Delivery{}, err
	}
	signed := func(secret string) []byte {
		key, _ := decodeSecret(secret) // Validate has decoded it
		return mac(key, []byte(id), []byte("."), []byte(tsValue), []byte("."), body)
	}
	if !anyMatch(s.Secrets, signed, sigs) && !anyVerifies(s.PublicKeys, standardContent(id, tsValue, body), asigs) {
		return Delivery{}, reject(schemeStandardWebhooks, ErrSignature, "no v1 signature matches the configured secrets, and no v1a signature the configured public keys; check that Secrets holds this endpoint's signing secret (whsec_…), or PublicKeys the provider's public key (whpk_…), and that Verify gets the body exactly as received, not decoded and re-encoded")
	}
	if err := fresh(schemeStandardWebhooks, ts, now, cmp.Or(s.Tolerance, ToleranceDefault)); err != nil {
		return Delivery{}, err
	}
	var typ string
	if fields, err := jsonObject(body); err == nil {
		if raw, ok := fields["type"]; ok && json.Unmarshal(raw, &typ) != nil {
			typ = ""
		}
	}
	return Delivery{ID: id, Type: typ, Timestamp: time.Unix(ts, 0).UTC()}, nil
}

// parseStandardSignatures reads "v1,<base64> v1,<base64> v1a,<base64>": the v1 signatures, and
// the v1a ones when withV1a. Other versions are ignored; an entry without a ',', a v1 that is not
// a base64 SHA-256, or (withV1a) a v1a that is not a base64 ed25519 signature is ErrMalformed.
func parseStandardSignatures(value string, withV1a bool) (sigs, asigs [][]byte, err error) {
	for i, entry := range strings.Fields(value) {
		version, val, ok := strings.Cut(entry, ",")
		if !ok {
			return nil, nil, reject(schemeStandardWebhooks, ErrMalformed, "webhook-signature entry %d is not <version>,<signature>; want v1,<base64>", i+1)
		}
		var list *[][]byte
		var size int
		var what string
		switch {
		case version == "v1":
			list, size, what = &sigs, sha256.Size, "HMAC-SHA256"
		case version == "v1a" && withV1a:
			list, size, what = &asigs, ed25519.SignatureSize, "ed25519 signature"
		default:
			continue
		}
		if len(*list) == maxSignatures {
			return nil, nil, reject(schemeStandardWebhooks, ErrMalformed, "webhook-signature has more than %d %s signatures", maxSignatures, version)
		}
		sig, err := base64.StdEncoding.DecodeString(val)
		if err != nil || len(sig) != size {
			return nil, nil, reject(schemeStandardWebhooks, ErrMalformed, "webhook-signature %s signature %d is not a base64 %s", version, len(*list)+1, what)
		}
		*list = append(*list, sig)
	}
	if len(sigs) == 0 && len(asigs) == 0 {
		if withV1a {
			return nil, nil, reject(schemeStandardWebhooks, ErrSignature, "webhook-signature has no v1 or v1a signature")
		}
		return nil, nil, reject(schemeStandardWebhooks, ErrSignature, "webhook-signature has no v1 signature; v1a (ed25519) signatures are verified only when PublicKeys is set")
	}
	return sigs, asigs, nil
}

// standardContent is what a Standard Webhooks signature signs: "<id>.<timestamp>.<body>".
func standardContent(id, ts string, body []byte) []byte {
	return append([]byte(id+"."+ts+"."), body...)
}

// anyVerifies reports whether any of sigs is an ed25519 signature of content under any of keys
// (whpk_ public keys that Validate has decoded).
func anyVerifies(keys []string, content []byte, sigs [][]byte) bool {
	for _, k := range keys {
		key, _ := decodePublicKey(k)
		for _, sig := range sigs {
			if ed25519.Verify(key, content, sig) {
				return true
			}
		}
	}
	return false
}

// decodePublicKey returns the ed25519 public key of "whpk_<base64>".
func decodePublicKey(key string) (ed25519.PublicKey, error) {
	if strings.HasPrefix(key, "whsk_") || strings.HasPrefix(key, "whsec_") {
		return nil, errors.New("is a secret key; give the provider's public key (whpk_…): a receiver must not hold the key that signs")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(key, "whpk_"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("is not base64 after its whpk_ prefix (%v); copy the key exactly as the provider shows it", err)
	case len(raw) != ed25519.PublicKeySize:
		return nil, fmt.Errorf("holds %d key bytes after its whpk_ prefix; an ed25519 public key has %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// decodeSecret returns the key bytes of a Standard Webhooks secret, "whsec_<base64>".
func decodeSecret(secret string) ([]byte, error) {
	if strings.HasPrefix(secret, "whsk_") || strings.HasPrefix(secret, "whpk_") {
		return nil, errors.New("is an asymmetric (ed25519) key; put the provider's public key (whpk_…) in PublicKeys")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("is not base64 after its whsec_ prefix (%v); copy the secret exactly as the provider shows it", err)
	case len(key) == 0:
		return nil, errors.New("holds no key bytes after its whsec_ prefix")
	}
	return key, nil
}

// validateConfig checks what the HMAC schemes share: secrets (one at least, each with check),
// and tolerance; name prefixes every message.
func validateConfig(name string, secrets []string, tolerance time.Duration, check func(string) error) error {
	var errs []error
	if len(secrets) == 0 {
		errs = append(errs, fmt.Errorf("%s: Secrets is empty; give the endpoint's signing secret (whsec_…)", name))
	}
	errs = append(errs, validateSecrets(name+": Secrets", secrets, check)...)
	errs = append(errs, validateTolerance(name, tolerance)...)
	return errors.Join(errs...)
}

// validateSecrets checks each of secrets (or keys): not empty, no white space around it, and
// check; field ("webhook.Stripe: Secrets") prefixes every message.
func validateSecrets(field string, secrets []string, check func(string) error) []error {
	var errs []error
	for i, secret := range secrets {
		var err error
		switch {
		case secret == "":
			err = errors.New("is empty")
		case strings.TrimSpace(secret) != secret:
			err = errors.New("has white space around it; a secret read from a file or the environment often ends in a newline: trim it")
		default:
			err = check(secret)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d] %w", field, i, err))
		}
	}
	return errs
}

// validateTolerance refuses a negative tolerance.
func validateTolerance(name string, tolerance time.Duration) []error {
	if tolerance < 0 {
		return []error{fmt.Errorf("%s: Tolerance %v cannot be less than zero (zero means ToleranceDefault, %v)", name, tolerance, ToleranceDefault)}
	}
	return nil
}

// singleHeader returns the one value of header name: missing is reason, more than one value or
// one longer than maxHeaderBytes is ErrMalformed.
func singleHeader(scheme string, header http.Header, name string, missing error) (string, error) {
	values := header.Values(name)
	if len(values) == 1 && values[0] == "" {
		values = nil
	}
	switch {
	case len(values) == 0:
		return "", reject(scheme, missing, "no %s header; check that the provider signs this endpoint's deliveries with the %s scheme", name, scheme)
	case len(values) > 1:
		return "", reject(scheme, ErrMalformed, "%d %s headers; want one (a proxy may have added one)", len(values), name)
	case len(values[0]) > maxHeaderBytes:
		return "", reject(scheme, ErrMalformed, "%s header is %d bytes; the limit is %d", name, len(values[0]), maxHeaderBytes)
	}
	return values[0], nil
}

// parseUnix reads unix seconds written the one way a signer writes them: decimal digits, no
// sign, no leading zero, no later than year 9999. The signature is computed over these digits,
// so accepting other spellings would let one signature stand for several timestamps.
func parseUnix(s string) (int64, error) {
	if s == "" || len(s) > len(strconv.Itoa(maxUnix)) || len(s) > 1 && s[0] == '0' ||
		strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, errors.New("is not unix seconds (decimal digits without sign or leading zeros)")
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ts > maxUnix {
		return 0, errors.New("is after year 9999")
	}
	return ts, nil
}

// fresh reports ErrStale when ts is further than tolerance from now.
func fresh(scheme string, ts int64, now time.Time, tolerance time.Duration) error {
	age := now.Sub(time.Unix(ts, 0))
	switch {
	case age > tolerance:
		return reject(scheme, ErrStale, "signed %s, %v before now (%s); the tolerance is %v: a replay, a delivery held up on the way, or this server's clock is wrong (check NTP)",
			time.Unix(ts, 0).UTC().Format(time.RFC3339), age, now.UTC().Format(time.RFC3339), tolerance)
	case -age > tolerance:
		return reject(scheme, ErrStale, "signed %s, %v after now (%s); the tolerance is %v: this server's clock or the sender's is wrong (check NTP)",
			time.Unix(ts, 0).UTC().Format(time.RFC3339), -age, now.UTC().Format(time.RFC3339), tolerance)
	}
	return nil
}

// checkID refuses an event ID that cannot serve as a deduplication key: invalid UTF-8 or control
// characters (which Postgres text refuses, or which print alike and compare unequal).
func checkID(scheme, id string) error {
	if !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0 {
		return reject(scheme, ErrMalformed, "the event ID is not printable UTF-8")
	}
	return nil
}

// jsonObject decodes body's top-level object. Keys match exactly, unlike encoding/json's struct
// fields, which would take "ID" for "id".
func jsonObject(body []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	if fields == nil {
		return nil, errors.New("it is null")
	}
	return fields, nil
}

// mac is the HMAC-SHA256 of the concatenated parts under key.
func mac(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// anyMatch reports whether any of sigs is the expected signature under any of secrets,
// comparing in constant time. The work is one HMAC per secret and len(sigs) comparisons each.
func anyMatch(secrets []string, expected func(secret string) []byte, sigs [][]byte) bool {
	for _, secret := range secrets {
		want := expected(secret)
		for _, sig := range sigs {
			if hmac.Equal(want, sig) {
				return true
			}
		}
	}
	return false
}
