package keys

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Length limits, in bytes. Downstream systems never see key parts (they see the hashed Token), so
// the limits are set by the receipts table: its primary key is all four parts, and a Postgres
// B-tree entry must stay under about 2.7 kB.
const (
	// MaxNameLen bounds the namespace, tenant, operation, step and compensation names (Temporal
	// itself caps namespace names at 255).
	MaxNameLen = 255
	// MaxIDLen bounds an explicit ID as the caller gives it (WithID, Given, Explicit). A
	// derived ID longer than this (very long workflow IDs) is replaced by its SHA-256, tagged by
	// scope, so derivation never fails on length.
	MaxIDLen = 1024
	// MaxKeyIDLen bounds Key.ID, which is an ID encoded with its scope tag: the longest is an
	// explicit ID of MaxIDLen bytes stored as "explicit:" and the ID. Explicit IDs are never
	// hashed, so what the caller chose stays readable in the receipts table.
	MaxKeyIDLen = MaxIDLen + len("explicit:")
)

// validatePart checks one key part: non-empty, at most limit bytes, valid UTF-8, and free of NUL
// and other control characters (which would make keys that print alike compare unequal, and
// which Postgres text columns reject outright in the NUL case).
func validatePart(part, value string, limit int) error {
	switch {
	case value == "":
		return &InvalidKeyError{Part: part, Reason: "is empty; give it a non-empty value"}
	case len(value) > limit:
		return &InvalidKeyError{Part: part, Reason: fmt.Sprintf("is %d bytes; the limit is %d", len(value), limit)}
	case !utf8.ValidString(value):
		return &InvalidKeyError{Part: part, Reason: "is not valid UTF-8"}
	}
	for i, r := range value {
		if unicode.IsControl(r) {
			return &InvalidKeyError{Part: part, Reason: fmt.Sprintf("has control character %U at byte %d", r, i)}
		}
	}
	return nil
}

// validateTenant reports whether tenant may be used as a key's tenant. The empty tenant is valid:
// it means "no tenant scope".
func validateTenant(tenant string) error {
	if tenant == "" {
		return nil
	}
	return validatePart("tenant", tenant, MaxNameLen)
}

// validateID reports whether id may be used as an explicit business key (Explicit scope): at
// most MaxIDLen bytes before its scope tag is added.
func validateID(id string) error { return validatePart("id", id, MaxIDLen) }

// validateStep reports whether name may be used as a step name (see WithStep).
func validateStep(name string) error { return validatePart("step", name, MaxNameLen) }
