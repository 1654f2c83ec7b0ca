package keys

import (
	"context"
	"strconv"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// Header names that tempotent writes on the activities a workflow schedules, and on workflows
// started with a tenant. They are part of the wire contract between workflow and activity
// workers: renaming one is a breaking change for running workflows.
const (
	HeaderTenant        = "tempotent-tenant"
	HeaderOriginalRunID = "tempotent-original-run-id"
	HeaderStep          = "tempotent-step"
	HeaderID            = "tempotent-id"
	// HeaderPinnedOperation and HeaderPinnedID carry a key fixed in workflow code (StepKey,
	// WithCompensation); the activity side uses it whatever scope it is configured with.
	HeaderPinnedOperation = "tempotent-pinned-operation"
	HeaderPinnedID        = "tempotent-pinned-id"
	// HeaderCompensates carries the forward step's token to its compensation activity, and
	// HeaderCompensatesOperation and HeaderCompensatesID its key's operation and ID, so that the
	// compensation can find the forward step's receipt (CompensatedKeyFrom).
	HeaderCompensates          = "tempotent-compensates"
	HeaderCompensatesOperation = "tempotent-compensates-operation"
	HeaderCompensatesID        = "tempotent-compensates-id"
)

var headerConverter = converter.GetDefaultDataConverter()

type (
	tenantKey       struct{}
	headerValuesKey struct{}
	stepKey         struct{}
	idKey           struct{}
	pinnedKey       struct{}
	occurrencesKey  struct{}
)

// pinned is a key fixed in workflow code for the activities scheduled with a context.
type pinned struct {
	key     Key
	forward *Key // the forward step's key, when key is a compensation's
}

// WithTenant returns a context whose workflows and activities run under tenant: give it to
// client.ExecuteWorkflow on a client whose ContextPropagators include TenantPropagator. The tenant
// travels in Temporal headers to the workflow and every activity it schedules; it is never read
// from an activity's input. It is validated where it enters Temporal (TenantPropagator refuses
// to start a workflow with a malformed tenant) and again where a key is derived.
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
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	p, err := headerConverter.ToPayload(tenant)
	if err != nil {
		return err
	}
	w.Set(HeaderTenant, p)
	return nil
}

func (tenantPropagator) Extract(ctx context.Context, r workflow.HeaderReader) (context.Context, error) {
	if p, ok := r.Get(HeaderTenant); ok {
		var tenant string
		if err := headerConverter.FromPayload(p, &tenant); err != nil {
			return ctx, err
		}
		ctx = WithTenant(ctx, tenant)
	}
	return ctx, nil
}

func (tenantPropagator) ExtractToWorkflow(ctx workflow.Context, r workflow.HeaderReader) (workflow.Context, error) {
	if p, ok := r.Get(HeaderTenant); ok {
		var tenant string
		if err := headerConverter.FromPayload(p, &tenant); err != nil {
			return ctx, err
		}
		ctx = workflow.WithValue(ctx, tenantKey{}, tenant)
	}
	return ctx, nil
}

// WithStep names the step that the activities scheduled with the returned context perform, for
// the ScopeWorkflow key. Name steps after the business intent ("charge", "reserve-stock") rather
// than the code, so that refactoring the workflow keeps its keys. When the same step is scheduled
// more than once in a run (a loop), each occurrence gets its own key: "charge#1", "charge#2", in
// the deterministic order workflow code schedules them.
func WithStep(ctx workflow.Context, name string) workflow.Context {
	return workflow.WithValue(ctx, stepKey{}, name)
}

// WithID sets the explicit business key (ScopeExplicit) for the activities scheduled with the
// returned context, such as "order-123/charge". The header carries it as given; the activity side
// validates it (ValidateID) and stores it tagged, "explicit:order-123/charge", as ExplicitKey
// does.
func WithID(ctx workflow.Context, id string) workflow.Context {
	return workflow.WithValue(ctx, idKey{}, id)
}

// Interceptor carries key identity from workflow code to activities. On the workflow side it
// writes the workflow's OriginalRunID (which survives Reset), the step name with its occurrence
// count and any explicit ID into each scheduled activity's header; on the activity side it reads
// them into the activity's context, where IdentityFromActivity finds them. Install it on every
// worker: worker.Options{Interceptors: []interceptor.WorkerInterceptor{&keys.Interceptor{}}}
// (the activity package's interceptor includes it). The zero value is ready to use.
type Interceptor struct {
	interceptor.WorkerInterceptorBase
}

var _ interceptor.WorkerInterceptor = (*Interceptor)(nil)

// InterceptWorkflow implements interceptor.WorkerInterceptor.
func (*Interceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &workflowInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

// InterceptActivity implements interceptor.WorkerInterceptor.
func (*Interceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}}
}

type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	// occurrences counts, per step name, the activities scheduled for it so far in this run. It
	// lives as long as one workflow execution's cached state and is rebuilt identically by every
	// replay, because workflow code schedules activities in a deterministic order. StepKey
	// reaches it through the workflow context.
	occurrences map[string]int
}

func (w *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	w.occurrences = make(map[string]int)
	return w.Next.Init(&workflowOutbound{
		WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound},
		occurrences:                     w.occurrences,
	})
}

func (w *workflowInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return w.Next.ExecuteWorkflow(workflow.WithValue(ctx, occurrencesKey{}, w.occurrences), in)
}

type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	occurrences map[string]int
}

func (w *workflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if err := w.writeHeader(ctx, activityType); err != nil {
		return failedFuture(ctx, err)
	}
	return w.Next.ExecuteActivity(ctx, activityType, args...)
}

func (w *workflowOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if err := w.writeHeader(ctx, activityType); err != nil {
		return failedFuture(ctx, err)
	}
	return w.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

func (w *workflowOutbound) writeHeader(ctx workflow.Context, activityType string) error {
	header := interceptor.WorkflowHeader(ctx)
	if header == nil {
		return nil
	}
	if p, ok := ctx.Value(pinnedKey{}).(pinned); ok {
		values := [][2]string{{HeaderPinnedOperation, p.key.Operation}, {HeaderPinnedID, p.key.ID}}
		if f := p.forward; f != nil {
			values = append(values, [2]string{HeaderCompensates, string(f.Token())},
				[2]string{HeaderCompensatesOperation, f.Operation}, [2]string{HeaderCompensatesID, f.ID})
		}
		return writeValues(header, values)
	}
	info := workflow.GetInfo(ctx)
	origin := info.OriginalRunID
	if origin == "" {
		// Servers always set it; Temporal's test environment does not. The run ID is the
		// OriginalRunID of a run that was never reset.
		origin = info.WorkflowExecution.RunID
	}
	step, _ := ctx.Value(stepKey{}).(string)
	if step == "" {
		step = activityType
	}
	if err := ValidateStep(step); err != nil {
		return err
	}
	w.occurrences[step]++
	step += "#" + strconv.Itoa(w.occurrences[step])

	values := [][2]string{{HeaderOriginalRunID, origin}, {HeaderStep, step}}
	if id, _ := ctx.Value(idKey{}).(string); id != "" {
		if err := ValidateID(id); err != nil {
			return err
		}
		values = append(values, [2]string{HeaderID, id})
	}
	return writeValues(header, values)
}

func writeValues(header map[string]*commonpb.Payload, values [][2]string) error {
	for _, v := range values {
		p, err := headerConverter.ToPayload(v[1])
		if err != nil {
			return err
		}
		header[v[0]] = p
	}
	return nil
}

func failedFuture(ctx workflow.Context, err error) workflow.Future {
	f, s := workflow.NewFuture(ctx)
	s.SetError(err)
	return f
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	h := interceptor.Header(ctx)
	ctx = context.WithValue(ctx, headerValuesKey{}, headerValues{
		originalRunID:   headerString(h, HeaderOriginalRunID),
		step:            headerString(h, HeaderStep),
		explicitID:      headerString(h, HeaderID),
		pinnedOperation: headerString(h, HeaderPinnedOperation),
		pinnedID:        headerString(h, HeaderPinnedID),
		compensates:     headerString(h, HeaderCompensates),
		compensatesOp:   headerString(h, HeaderCompensatesOperation),
		compensatesID:   headerString(h, HeaderCompensatesID),
	})
	return a.Next.ExecuteActivity(ctx, in)
}

type headerValues struct {
	originalRunID, step, explicitID string
	pinnedOperation, pinnedID       string
	compensates                     string
	compensatesOp, compensatesID    string
}

// CompensatesFrom returns, in a compensation activity scheduled with WithCompensation, the
// token of the forward step it compensates: the key under which the forward effect (say, a
// charge) was made, so the compensation can find it at the downstream even when the forward
// activity's result was never seen.
func CompensatesFrom(ctx context.Context) (Token, bool) {
	t := Token(headerValuesFrom(ctx).compensates)
	return t, t != ""
}

// CompensatedKeyFrom returns, in a compensation activity scheduled with WithCompensation, the key
// of the forward step it compensates, in the activity's namespace and tenant: the key of the
// forward step's receipt, which tells whether the forward effect can still happen (see the
// activity package's ForwardSettled).
func CompensatedKeyFrom(ctx context.Context) (Key, bool) {
	h := headerValuesFrom(ctx)
	if h.compensatesOp == "" || h.compensatesID == "" || !activity.IsActivity(ctx) {
		return Key{}, false
	}
	k := Key{Namespace: activity.GetInfo(ctx).Namespace, Tenant: TenantFrom(ctx), Operation: h.compensatesOp, ID: h.compensatesID}
	return k, k.Validate() == nil
}

func headerValuesFrom(ctx context.Context) headerValues {
	v, _ := ctx.Value(headerValuesKey{}).(headerValues)
	return v
}

func headerString(h map[string]*commonpb.Payload, name string) string {
	var s string
	if p := h[name]; p != nil {
		_ = headerConverter.FromPayload(p, &s) // a malformed value reads as absent, and derivation says so
	}
	return s
}
