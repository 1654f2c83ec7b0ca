// Package receipttest holds what the tests of the activity and operator packages both do to
// receipts: an attempt that dies after its effect, retries as Temporal would make them, and a
// payload codec that stands for encryption.
package receipttest

import (
	"context"
	"errors"
	"runtime"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
)

// CrashAfterEffect starts an attempt that performs its effect and then vanishes without
// recording anything, as a worker killed after the external call would. It returns once the
// effect happened.
func CrashAfterEffect(ctx context.Context, s *activity.Store, c activity.Call, effect func(keys.Token)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = activity.Do(ctx, s, c, func(ctx context.Context) (struct{}, error) {
			tok, _ := keys.TokenFrom(ctx)
			effect(tok)
			runtime.Goexit() // the process is gone: nothing after the effect runs
			return struct{}{}, nil
		})
	}()
	<-done
}

// DoUntilDone calls Do the way Temporal's retries would: again after each in-progress error.
func DoUntilDone[T any](ctx context.Context, s *activity.Store, c activity.Call, fn func(context.Context) (T, error)) (T, error) {
	for {
		out, err := activity.Do(ctx, s, c, fn)
		if !errors.As(err, new(*activity.InProgressError)) {
			return out, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Rot13Codec stands for an encryption codec: it transforms the payload's data, marks the
// payload as its own (Rot13Encoding), and leaves payloads it did not encode alone.
type Rot13Codec struct{}

// Rot13Encoding is the encoding of the payloads Rot13Codec made.
const Rot13Encoding = "binary/rot13"

func rot13(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			c = 'a' + (c-'a'+13)%26
		case c >= 'A' && c <= 'Z':
			c = 'A' + (c-'A'+13)%26
		}
		out[i] = c
	}
	return out
}

// Encode wraps each payload in one of Rot13Encoding.
func (Rot13Codec) Encode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		inner, err := p.Marshal()
		if err != nil {
			return nil, err
		}
		out[i] = &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(Rot13Encoding)}, Data: rot13(inner)}
	}
	return out, nil
}

// Decode unwraps the payloads of Rot13Encoding and passes the others as they are.
func (Rot13Codec) Decode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != Rot13Encoding {
			out[i] = p
			continue
		}
		inner := new(commonpb.Payload)
		if err := inner.Unmarshal(rot13(p.GetData())); err != nil {
			return nil, err
		}
		out[i] = inner
	}
	return out, nil
}
