package keys

import (
	"context"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

// headerTenant carries the tenant from the client that starts a workflow to the workflow, and
// from the workflow to its activities. It is part of the wire contract between clients, workflow
// workers and activity workers: renaming it is a breaking change for running workflows.
const headerTenant = "tempotent-tenant"

var headerConverter = converter.GetDefaultDataConverter()

type tenantKey struct{}

// WithTenant returns a context whose workflows and activities run under tenant: give it to
// client.ExecuteWorkflow on a client whose ContextPropagators include TenantPropagator. The tenant
// travels in Temporal headers to the workflow and every activity it schedules; it is never read
// from an activity's input. It is validated where it enters Temporal (TenantPropagator refuses
// to start a workflow with a malformed tenant) and again where a key is made.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the tenant carried by ctx, or "" for none.
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// TenantFromWorkflow returns the tenant the workflow running in ctx was started with, or "".
func TenantFromWorkflow(ctx workflow.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// TenantPropagator returns the context propagator that carries the tenant from a client's
// context (WithTenant) to the workflow and from the workflow to its activities. Install it in
// client.Options.ContextPropagators on every client and worker.
func TenantPropagator() workflow.ContextPropagator { return tenantPropagator{} }

type tenantPropagator struct{}

var _ workflow.ContextPropagator = tenantPropagator{}

func (tenantPropagator) Inject(ctx context.Context, w workflow.HeaderWriter) error {
	return injectTenant(TenantFrom(ctx), w)
}

func (tenantPropagator) InjectFromWorkflow(ctx workflow.Context, w workflow.HeaderWriter) error {
	return injectTenant(TenantFromWorkflow(ctx), w)
}

// injectTenant validates the tenant where it enters Temporal: a header carries it as JSON, which
// would turn invalid UTF-8 into U+FFFD, silently making it another tenant.
func injectTenant(tenant string, w workflow.HeaderWriter) error {
	if tenant == "" {
		return nil
	}
	if err := validateTenant(tenant); err != nil {
		return err
	}
	p, err := headerConverter.ToPayload(tenant)
	if err != nil {
		return err
	}
	w.Set(headerTenant, p)
	return nil
}

func (tenantPropagator) Extract(ctx context.Context, r workflow.HeaderReader) (context.Context, error) {
	tenant, ok, err := readTenant(r)
	if ok {
		ctx = WithTenant(ctx, tenant)
	}
	return ctx, err
}

func (tenantPropagator) ExtractToWorkflow(ctx workflow.Context, r workflow.HeaderReader) (workflow.Context, error) {
	tenant, ok, err := readTenant(r)
	if ok {
		ctx = workflow.WithValue(ctx, tenantKey{}, tenant)
	}
	return ctx, err
}

func readTenant(r workflow.HeaderReader) (string, bool, error) {
	p, ok := r.Get(headerTenant)
	if !ok {
		return "", false, nil
	}
	var tenant string
	if err := headerConverter.FromPayload(p, &tenant); err != nil {
		return "", false, err
	}
	return tenant, true, nil
}
