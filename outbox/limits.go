package outbox

// MaxPayloadBytes is the largest payload Put accepts (Config.MaxPayloadBytes, or its default):
// a producer that takes payloads from outside, such as webhook.Handler, checks its own limit
// against it when it is built, instead of failing every Put above it.
func (o *Outbox) MaxPayloadBytes() int { return o.cfg.MaxPayloadBytes }
