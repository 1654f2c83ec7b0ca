package outbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/keys"
)

// HeaderTenant is the message header that names the tenant a message belongs to. The webhook
// intake sets it (webhook.HeaderTenant is this name); a producer may set it on any message.
// TemporalPublisher publishes such a message under keys.WithTenant, so the tenant reaches the
// workflow's and its activities' keys. The name is stored with pending messages: it does not
// change.
const HeaderTenant = "Webhook-Tenant"

// ErrNoTenantPropagator: a message has a tenant (HeaderTenant) and TemporalPublisher.Client is
// an SDK client without keys.TenantPropagator in its ContextPropagators, so the tenant would not
// reach the workflow. It is permanent: install the propagator (client.Options.
// ContextPropagators), then requeue the message.
var ErrNoTenantPropagator = errors.New("outbox: the message has a tenant and the Temporal client has no keys.TenantPropagator")

// tenantContext returns ctx under the message's tenant, or ctx itself for a message without one.
// A tenant the propagator would refuse (keys' rules) is permanent: it never becomes valid.
func tenantContext(ctx context.Context, c client.Client, d Delivery) (context.Context, error) {
	tenant := d.Headers[HeaderTenant]
	if tenant == "" {
		return ctx, nil
	}
	ctx = keys.WithTenant(ctx, tenant)
	if err := keys.TenantPropagator().Inject(ctx, discardHeader{}); err != nil {
		return nil, Permanent(fmt.Errorf("outbox: message %s has tenant %q, which is not a valid tenant: %w", d.ID, tenant, err))
	}
	if propagates, known := propagatesTenant(c); known && !propagates {
		return nil, Permanent(fmt.Errorf("%w: message %s has tenant %q; add keys.TenantPropagator() to client.Options.ContextPropagators, then requeue it", ErrNoTenantPropagator, d.ID, tenant))
	}
	return ctx, nil
}

// discardHeader is a workflow.HeaderWriter that keeps nothing: the propagator's Inject validates
// the tenant into it.
type discardHeader struct{}

func (discardHeader) Set(string, *commonpb.Payload) {}

var tenantPropagatorType = reflect.TypeOf(keys.TenantPropagator())

// propagatesTenant reports whether c carries keys.TenantPropagator, when it can tell (known). The
// SDK's client.Client does not expose its options: this reads the propagators of the SDK's own
// client type (a pointer to a struct with a contextPropagators slice, which go.temporal.io/sdk
// has had since v1.0). Any other client (a wrapper, a test double) is unknown and trusted, and so
// is an SDK whose client no longer has that field: the check is a guard against the common
// mistake, not a proof.
func propagatesTenant(c client.Client) (propagates, known bool) {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false, false
	}
	props := v.Elem().FieldByName("contextPropagators")
	if !props.IsValid() || props.Kind() != reflect.Slice {
		return false, false
	}
	for i := range props.Len() {
		if p := props.Index(i); p.Kind() == reflect.Interface && !p.IsNil() && p.Elem().Type() == tenantPropagatorType {
			return true, true
		}
	}
	return false, true
}
