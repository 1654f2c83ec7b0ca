package keys

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
)

// Key names one business intent. Two calls with equal Keys are the same intent and must have at
// most one effect; the receipts table's primary key is all four parts.
//
// The zero Key is not valid: Namespace, Operation and ID are required. Tenant may be empty.
type Key struct {
	// Namespace is the Temporal namespace the activity runs in. Derive fills it from
	// activity.GetInfo, never from the activity's input.
	Namespace string
	// Tenant is an optional account or merchant scope, carried in Temporal headers by
	// TenantPropagator and never read from the activity's input.
	Tenant string
	// Operation names what is done: the activity type by default.
	Operation string
	// ID identifies the intent within the operation, at most MaxKeyIDLen bytes. The keys this
	// package derives or builds spell it with a scope tag ("wf:", "run:", "activity:",
	// "explicit:", "comp:") and escaped parts, so that no two intents share one; the package
	// documentation shows what each scope's ID is made of. A Key written by hand (for activity.Do outside Temporal)
	// may hold any valid ID: choose one that cannot equal a tagged one, or use the same scheme.
	ID string
}

// Validate reports the first part of k that is missing or malformed, as an *InvalidKeyError:
// namespace and operation must be 1 to MaxNameLen bytes, the tenant empty or 1 to MaxNameLen
// bytes, the ID 1 to MaxKeyIDLen bytes (room for an explicit ID of MaxIDLen bytes and its scope
// tag), all valid UTF-8 without control characters.
func (k Key) Validate() error {
	if err := validatePart("namespace", k.Namespace, MaxNameLen); err != nil {
		return err
	}
	if err := validateTenant(k.Tenant); err != nil {
		return err
	}
	if err := validatePart("operation", k.Operation, MaxNameLen); err != nil {
		return err
	}
	return validatePart("id", k.ID, MaxKeyIDLen)
}

// String renders k for logs and error messages. It is not the canonical form that tokens hash.
func (k Key) String() string {
	return fmt.Sprintf("%s/%s/%s/%s", k.Namespace, k.Tenant, k.Operation, k.ID)
}

// canonical is the unambiguous byte form of k that tokens are hashed from: a version tag and each
// part prefixed with its length, so that no choice of part values can make two different keys
// encode alike (as "a/b"+"c" and "a"+"b/c" would with a separator).
func (k Key) canonical() []byte {
	const tag = "tempotent/key/v1"
	b := make([]byte, 0, len(tag)+len(k.Namespace)+len(k.Tenant)+len(k.Operation)+len(k.ID)+4*binary.MaxVarintLen64)
	b = append(b, tag...)
	for _, part := range [...]string{k.Namespace, k.Tenant, k.Operation, k.ID} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	return b
}

// Token is the key as an external system sees it: a fixed-length, URL-safe string derived by
// SHA-256 from the key's four parts, so it scopes by namespace and tenant and reveals no workflow
// IDs. It is what goes into an Idempotency-Key header.
func (k Key) Token() Token {
	sum := sha256.Sum256(k.canonical())
	return Token(base64.RawURLEncoding.EncodeToString(sum[:]))
}

// Compensation derives the key of the compensation named name (for example "refund") for the
// forward step k. It is deterministic, so every replay, retry and Reset of the workflow derives
// the same compensation key; it differs from k and from every other compensation of k. Its ID is
// "comp:" with k's operation (escaped) and k's token, "comp:Charge/<token>", so it stays short
// however long k's ID is and never equals an ID of another scope.
func (k Key) Compensation(name string) (Key, error) {
	if err := k.Validate(); err != nil {
		return Key{}, err
	}
	if err := validatePart("compensation", name, MaxNameLen); err != nil {
		return Key{}, err
	}
	return Key{
		Namespace: k.Namespace,
		Tenant:    k.Tenant,
		Operation: name,
		ID:        compensationID(k.Operation, k.Token()),
	}, nil
}

// Item derives the key of one item of a batch that the intent k runs (one payee of a payout, one
// recipient of a mailing), from k and the item's own ID, which must be stable across attempts
// (a payee's ID, not a position in a list that can change). Every attempt of k derives the
// same item keys, so each item has its own receipt and downstream token; two items of k differ
// when their IDs do, and no item key equals a key of another scope. Its operation is k's and
// its ID is "item:" with k's token and the item's ID (escaped), "item:<token>/<id>", hashed as
// other derived IDs are when it would be longer than MaxIDLen.
func (k Key) Item(id string) (Key, error) {
	if err := k.Validate(); err != nil {
		return Key{}, err
	}
	if err := validatePart("item id", id, MaxIDLen); err != nil {
		return Key{}, err
	}
	return Key{Namespace: k.Namespace, Tenant: k.Tenant, Operation: k.Operation, ID: itemID(k.Token(), id)}, nil
}
