// Settling an unknown outcome by hand: what a person found out at the downstream.

package operator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
)

// ErrNotUnresolved is matched by Resolve's error for a receipt whose outcome is not unresolved:
// it is recorded, or an attempt is running, and resolving it by hand would overwrite what
// happened.
var ErrNotUnresolved = errors.New("receipt is not unresolved")

// Resolution settles an unresolved receipt: what a person found out at the downstream.
type Resolution struct {
	// Applied: the effect happened. The receipt is completed with Result, and the next
	// attempt of the activity returns Result without calling anything. Otherwise the effect
	// did not happen: the receipt's lease stays ended with no effect possible, and the next
	// attempt calls the downstream again, under the same token. Say so only once no attempt
	// can still be sending: a worker frozen in the middle of its call (a long pause, a VM
	// freeze) may still deliver its request, and the receipt cannot fence the downstream.
	Applied bool
	// Result is the activity's result to record when Applied, encoded with the client's
	// DataConverter and Codecs (Config) as an activity's own result would be: give a value of the
	// activity's result type (or json.RawMessage with its JSON). Required with Applied, and
	// refused without it.
	Result any
	// By and Reason are recorded with the resolution: who, and why (a ticket, what the
	// provider's dashboard showed). Both are required.
	By, Reason string
}

// Resolve settles the unresolved receipt under token as r says, and returns it as it now is, and
// records who, when, why and whether applied in the audit log (Audit) in the same statement. It
// refuses (ErrNotUnresolved) a receipt whose outcome is recorded or whose attempt is running:
// only a receipt that Receipt.Unresolved marks may be settled by hand. An attempt that still
// holds an ended lease loses it: its late write matches nothing, and it returns what r recorded
// (Applied) or a retryable FencedOut (not applied), after which the next attempt calls again.
// A client without Codecs refuses (ErrSealedResults) to store a result beside results that the
// workers' codecs sealed.
func (c *Client) Resolve(ctx context.Context, token keys.Token, r Resolution) (Receipt, error) {
	if strings.TrimSpace(r.By) == "" || strings.TrimSpace(r.Reason) == "" {
		return Receipt{}, errors.New("resolve: say who resolves (Resolution.By) and why (Resolution.Reason); both are recorded on the receipt")
	}
	if r.Applied && r.Result == nil {
		// The next attempt would return the zero value of the activity's result type.
		return Receipt{}, errors.New(`resolve: Applied needs Resolution.Result, the activity's result as the effect produced it (json.RawMessage("null") for an activity that returns none)`)
	}
	if !r.Applied && r.Result != nil {
		// Most likely a forgotten Applied: recording "not applied" would have the next attempt
		// call again, and a second effect, where the caller meant to record one.
		return Receipt{}, errors.New("resolve: Resolution.Result is set but Applied is false; set Applied to record the result, or drop Result to record that the effect did not happen")
	}
	before, err := c.Receipt(ctx, token)
	if err != nil {
		return Receipt{}, fmt.Errorf("resolve: %w", err)
	}
	stmt := resolveNotApplied
	args := []any{string(token), newReservation(), r.By, r.Reason}
	if r.Applied {
		if err := c.checkUnsealed(ctx, before.Key); err != nil {
			return Receipt{}, fmt.Errorf("resolve %s: %w", token, err)
		}
		result, err := c.encode(r.Result)
		if err != nil {
			return Receipt{}, fmt.Errorf("resolve %s: %w", token, err)
		}
		stmt = resolveApplied
		args = append(args, result, c.cfg.Retention.Microseconds())
	}
	stmt, args = c.audited(fmt.Sprintf(stmt, c.receipts, schema.Unresolved), args, AuditResolve, map[string]bool{"applied": r.Applied})
	tag, err := c.exec(ctx, stmt, args...)
	if err != nil {
		return Receipt{}, fmt.Errorf("resolve %s: %w", token, c.explain(err))
	}
	if tag.RowsAffected() == 0 {
		now, err := c.Receipt(ctx, token)
		if err != nil {
			return Receipt{}, fmt.Errorf("resolve: %w", err)
		}
		return now, fmt.Errorf("%w: receipt %s is %s; only an unknown outcome, or a lease that ended after a possible effect, can be resolved",
			ErrNotUnresolved, token, now.Status)
	}
	return c.Receipt(ctx, token)
}

// encode turns a resolution's result into the result column, as an activity's own result is
// stored: the DataConverter's payload, bounded by MaxPayloadBytes, sealed with Codecs, so that
// an operator's result is not the one kept in cleartext at rest.
func (c *Client) encode(v any) ([]byte, error) {
	p, err := c.cfg.DataConverter.ToPayload(v)
	if err != nil {
		return nil, fmt.Errorf("encode the result: %w", err)
	}
	if n := proto.Size(p); n > c.cfg.MaxPayloadBytes {
		return nil, fmt.Errorf("the result is %d bytes, above the limit of %d (Config.MaxPayloadBytes, which should be the workers' activity.Config.MaxPayloadBytes)",
			n, c.cfg.MaxPayloadBytes)
	}
	return schema.EncodeResult(c.cfg.Codecs, p)
}

// resolveApplied and resolveNotApplied settle an unresolved receipt by hand (%[1]s the receipts,
// %[2]s schema.Unresolved; $1 its token, $3 who, $4 why). Race: an attempt that takes over first
// makes the lease live, and the receipt no longer unresolved, so the resolution matches nothing
// (and the other way round). Applied completes the receipt with the result $5: no attempt's
// write matches a completed receipt. Not applied leaves it pending with its lease ended and no
// effect possible, so that the next attempt takes over and calls again under the same token; the
// new reservation $2 (held by no attempt) is what keeps a stale holder of the ended lease from
// completing or releasing it afterwards, and makes an attempt that read the receipt before the
// resolution (and decided from its effect_possible) fail its takeover and read again, as an
// attempt's release does.
const (
	resolveApplied = `
UPDATE %[1]s SET state = 'completed', result = $5, failure = NULL, error_type = NULL, error_message = NULL,
	reservation = $2, lease_expires_at = NULL, completed_at = now(), updated_at = now(),
	expires_at = greatest(expires_at, now() + $6::bigint * interval '1 microsecond'),
	resolved_at = now(), resolved_by = $3, resolution = $4
WHERE token = $1 AND %[2]s`
	resolveNotApplied = `
UPDATE %[1]s SET state = 'pending', result = NULL, failure = NULL, error_type = NULL, error_message = NULL,
	reservation = $2, lease_expires_at = least(coalesce(lease_expires_at, now()), now()), effect_possible = false,
	completed_at = NULL, updated_at = now(), resolved_at = now(), resolved_by = $3, resolution = $4
WHERE token = $1 AND %[2]s`
)

// newReservation is a reservation held by no attempt: 128 random bits, as the workers make theirs,
// for a uuid column.
func newReservation() pgtype.UUID {
	u := pgtype.UUID{Valid: true}
	_, _ = rand.Read(u.Bytes[:]) // crypto/rand.Read never fails (Go 1.24+)
	return u
}
