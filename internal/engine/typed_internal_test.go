package engine

import (
	"context"

	commonpb "go.temporal.io/api/common/v1"
)

// doTyped is activity.Do over the engine: fn's result encoded with the store's DataConverter,
// and the payload Do returns decoded into a T.
func doTyped[T any](ctx context.Context, s *Store, c Call, fn func(context.Context) (T, error)) (T, error) {
	var out T
	p, err := s.Do(ctx, c, func(ctx context.Context) (*commonpb.Payload, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return s.Encode(c.Key, v)
	})
	if err != nil {
		return out, ToTemporal(err)
	}
	if p != nil {
		err = s.cfg.DataConverter.FromPayload(p, &out)
	}
	return out, err
}
