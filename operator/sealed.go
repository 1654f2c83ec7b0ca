// Results sealed by the workers' codecs (activity.Config.Codecs), and keyed fingerprints, as
// the operator sees them.

package operator

import (
	"context"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/keys"
)

// ErrSealedResults is matched by Resolve's error when the client has no Codecs and the results
// the workers stored beside the receipt (same tenant and operation) are sealed by codecs it does
// not have: the result it would store would be the only one in cleartext at rest, and workers
// whose codec refuses an unsealed payload could not replay it. Resolve with a Client whose
// Config.Codecs are the workers' activity.Config.Codecs. With no result stored beside it to
// look at, Resolve cannot tell, and stores the result as its Codecs say.
var ErrSealedResults = errors.New("the stored results are sealed by codecs this client does not have")

// sealedSample is how many results stored beside a receipt Resolve looks at.
const sealedSample = 20

// plainEncodings are the encodings of the SDK's default payload converters: a result in one of
// them was not sealed by a codec.
var plainEncodings = map[string]bool{
	converter.MetadataEncodingNil: true, converter.MetadataEncodingBinary: true, converter.MetadataEncodingJSON: true,
	converter.MetadataEncodingProtoJSON: true, converter.MetadataEncodingProto: true,
}

// checkUnsealed refuses (ErrSealedResults) to store an unsealed result beside k when the
// results stored beside it are sealed: results of the same tenant and operation, found through
// the primary key, whose encoding neither the SDK's converters nor the client's DataConverter
// read. A client with Codecs seals what it stores and is not checked.
func (c *Client) checkUnsealed(ctx context.Context, k keys.Key) error {
	if len(c.cfg.Codecs) > 0 {
		return nil
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	rows, err := c.db.Query(ctx, fmt.Sprintf(`SELECT result FROM %s
WHERE (namespace, tenant, operation) = ($1, $2, $3) AND state = 'completed' AND result IS NOT NULL LIMIT %d`, c.receipts, sealedSample),
		k.Namespace, k.Tenant, k.Operation)
	if err != nil {
		return c.explain(err)
	}
	defer rows.Close()
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return err
		}
		if enc, sealed := c.sealed(raw); sealed {
			return fmt.Errorf("%w: results of %q stored by the workers have encoding %q, which a codec made (activity.Config.Codecs). "+
				"Resolve from Go with an operator.Client whose Config.Codecs are the workers', so that this result is sealed as theirs are",
				ErrSealedResults, k.Operation, enc)
		}
	}
	return rows.Err()
}

// sealed reports whether a stored result column is sealed by a codec the client does not have,
// with its encoding.
func (c *Client) sealed(raw []byte) (string, bool) {
	p := new(commonpb.Payload)
	if err := proto.Unmarshal(raw, p); err != nil {
		return "", false
	}
	enc := string(p.GetMetadata()[converter.MetadataEncoding])
	if plainEncodings[enc] {
		return enc, false
	}
	var v any
	return enc, c.cfg.DataConverter.FromPayload(p, &v) != nil
}

// storedFingerprint renders a receipt's fingerprint columns as keys.Fingerprint.String does:
// "v2:<hex>", or "k2:<hex>" when the workers keyed it.
func storedFingerprint(version int16, sum []byte) string {
	fp := keys.Fingerprint{Version: version}
	if len(sum) != len(fp.Sum) {
		return fmt.Sprintf("v%d:%x", version, sum)
	}
	copy(fp.Sum[:], sum)
	return fp.String()
}
