// The receipts table as both of its users read it: the activity package, which writes receipts
// on the hot path, and the operator package, which lists, settles and purges them. What a row's
// columns mean is said here once, so that the two agree.

package schema

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// Receipt states, as the state column stores them (operator.StatePending, … for users).
const (
	StatePending   = "pending"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// RetentionDefault is how long a finished receipt is kept (activity.Config.Retention,
// operator.Config.Retention). It must exceed the longest time over which the same intent can be
// executed again: the activity's retry horizon (ScheduleToClose), the workflow's own retries,
// and how far back operators may Reset a workflow. Past it, the replay-horizon guard refuses to
// run the activity.
const RetentionDefault = 7 * 24 * time.Hour

// ReceiptsTable is the receipts table of schema, quoted for SQL.
func ReceiptsTable(schema string) string { return pgx.Identifier{schema, "receipts"}.Sanitize() }

// AuditTable is the audit log of operator actions in schema (migration 005), quoted for SQL.
func AuditTable(schema string) string { return pgx.Identifier{schema, "audit"}.Sanitize() }

// Unresolved is the condition of a receipt whose outcome nobody knows: recorded as
// OutcomeUnknown, or pending with an ended lease after an attempt that may have had its effect.
// Purge keeps such receipts however old they are; an operator resolves them.
const Unresolved = `(error_type = 'tempotent.OutcomeUnknown' OR (state = 'pending' AND effect_possible AND lease_expires_at <= now()))`

// Purgeable is the condition of a receipt Purge may forget: past its retention and settled
// (completed, failed for a known reason, or pending after attempts that certainly had no effect
// and whose lease has ended). Its negation is what keeps a partition from being dropped.
const Purgeable = `expires_at <= now() AND (state = 'completed'
		OR (state = 'failed' AND error_type IS DISTINCT FROM 'tempotent.OutcomeUnknown')
		OR (state = 'pending' AND NOT effect_possible AND lease_expires_at <= now()))`

// PartitionsAhead is how many days of partitions a purge of a partitioned receipts table keeps
// created ahead of today: three days in which inserts go on if purging stops. Not more: a lookup
// by key probes every partition, the empty ones ahead included.
const PartitionsAhead = 3

// VoidResult is what a completed receipt stores for a void result (a nil payload: a nil
// interface returned, or a reconciled effect with no result): a Temporal Payload of the nil
// encoding and no data, protobuf-encoded, and not sealed (it holds nothing to hide). The schema
// refuses a completed receipt with no result (migration 006, which gave this value to the void
// results stored before it as NULL), so that a write that forgets the result fails instead of
// leaving a receipt that replays nothing. DecodeResult turns it back into no payload, so a void
// result replays as it was returned: as none.
var VoidResult = mustMarshal(&commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingNil)}})

func mustMarshal(p *commonpb.Payload) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

// isVoid reports whether a stored payload is VoidResult.
func isVoid(p *commonpb.Payload) bool {
	return len(p.GetData()) == 0 && len(p.GetMetadata()) == 1 &&
		string(p.GetMetadata()[converter.MetadataEncoding]) == converter.MetadataEncodingNil
}

// EncodeResult is the result column for p: p sealed with codecs (applied last to first, as
// converter.NewCodecDataConverter does), protobuf-encoded; VoidResult for a nil p.
func EncodeResult(codecs []converter.PayloadCodec, p *commonpb.Payload) ([]byte, error) {
	if p == nil {
		return VoidResult, nil
	}
	ps := []*commonpb.Payload{p}
	for i := len(codecs) - 1; i >= 0; i-- {
		var err error
		if ps, err = codecs[i].Encode(ps); err != nil {
			return nil, fmt.Errorf("encode result with Config.Codecs: %w", err)
		}
	}
	return proto.Marshal(ps[0])
}

// DecodeResult reverses EncodeResult on a stored result column, so that what comes back is the
// DataConverter's payload, which the SDK encodes with the client's codecs once. A void result
// decodes as no payload, as it was returned.
func DecodeResult(codecs []converter.PayloadCodec, b []byte) (*commonpb.Payload, error) {
	p := new(commonpb.Payload)
	if err := proto.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("decode recorded result: %w", err)
	}
	if isVoid(p) {
		return nil, nil
	}
	ps := []*commonpb.Payload{p}
	for _, c := range codecs {
		var err error
		if ps, err = c.Decode(ps); err != nil {
			return nil, fmt.Errorf("decode recorded result with Config.Codecs: %w", err)
		}
	}
	if len(ps) != 1 {
		return nil, fmt.Errorf("decode recorded result with Config.Codecs: got %d payloads, want 1", len(ps))
	}
	return ps[0], nil
}
