// Package keys decides the idempotency keys that make a Temporal activity's effect happen once per
// business intent, and the values derived from them: downstream tokens, compensation keys and
// request fingerprints.
//
// A Key has four parts: the Temporal namespace, an optional tenant, the operation and an ID.
// Workflow code decides the operation and the ID of every activity it schedules; the activity side
// adds the namespace and the tenant. One interceptor does both (the activity package's
// NewInterceptor includes this package's): on the workflow side it writes the decision into one
// versioned header, and on the activity side FromActivity reads it back. An activity never derives
// a key of its own, so a worker's configuration cannot change what a workflow decided, and a
// header it cannot honour is refused before anything is written.
//
// Workflow code names intents with context functions, all optional:
//
//   - nothing: the activity is the next occurrence of a step named after its activity type, in
//     the workflow scope;
//   - WithStep(ctx, "charge"): the step, which is the key's operation. Occurrences are counted,
//     so a loop gets "charge#1", "charge#2";
//   - WithID(ctx, "order-123"): an explicit business key. The same operation and ID from any
//     workflow is one intent;
//   - WithRunScope(ctx): keyed by this run alone, as Temporal's documentation advises;
//   - StepKey(ctx, "charge"): decide the key now and hold it (sagas register compensations under
//     it); WithCompensation keys a compensation from its forward step. The context either returns
//     keys exactly one activity, the first scheduled with it: a step, ID or run scope named on it
//     later gets its own key, and a second activity scheduled with it as it is fails with
//     ErrPinnedContext, so that shadowing ctx never keys a later activity under the first one's
//     key.
//
// The ID's scope is spelled in it, and no two scopes share an ID:
//
//	wf:order-123/<epoch>/charge#1        workflow scope (the default)
//	run:order-123/<run ID>/charge#1      WithRunScope
//	upd:order-123/<update ID>/charge#1   activities scheduled by an update handler
//	explicit:order-123                   WithID, Given, Explicit
//	activity:<activity ID>/<run ID>      a standalone activity
//	comp:charge/<forward token>          a compensation (Key.Compensation)
//
// Each part is percent-escaped ('%', '/', '#'), and a derived ID longer than MaxIDLen becomes its
// hash, still tagged: "wf:sha256:<hex>".
//
// What each scope survives:
//
//   - workflow: the activity's retries, a workflow Reset and a workflow retry (a retried
//     workflow's charge replays the first run's receipt); new for each Continue-As-New run and
//     each cron run. The epoch is how a run tells them apart: the chain's FirstRunID for the
//     first run, its retries and resets; an epoch the interceptor writes on the Continue-As-New
//     command for the run it starts; the run's own OriginalRunID for a cron run. A retried cron
//     run cannot name the run it retries (Temporal gives it nothing to), so its activities are
//     refused a key (ErrNoIdentity) rather than given new ones; key them with WithID or
//     WithRunScope. (The comment on the epoch's derivation, in the source of epoch.go, tables
//     what Temporal gives each kind of run.)
//   - workflow, in a child workflow: as above, except that the first run's epoch comes from the
//     parent, whose interceptor writes on the child's start the identity in the parent that an
//     activity named as the child would get (WithStep, WithID, WithRunScope or the update
//     handler on the start's context, else the child's workflow type). So the child's keys
//     survive what that identity survives: a parent's reset or workflow retry that starts the
//     child again replays the child's effects instead of repeating them — provided the child
//     gets the same workflow ID again: give it one (workflow.ChildWorkflowOptions.WorkflowID,
//     from the business key or the parent's ID), not the SDK's default. A child started with
//     WithRunScope acts again after the parent's reset, as an activity would. The child of a
//     parent refused its epoch is refused its workflow-scope keys too; the child of a parent
//     without the interceptor keys by its own first run, and acts again when started again.
//   - update: an activity scheduled from an update handler is keyed by the update's ID, so the
//     same update delivered again after Continue-As-New replays instead of repeating.
//   - run: the activity's retries only.
//   - explicit: whatever you name.
//
// Local activities get the same keys as regular ones: the SDK retries a local activity by timer
// under a new activity ID, with the header it was first scheduled with.
//
// An activity with no workflow gets its key only from what it is given: Given in its context
// (TestActivityEnvironment, a Nexus operation handler keyed by its request ID), or its own
// activity ID and activity run ID when a client started it standalone. It is never keyed by an
// empty or shared ID: without either, FromActivity returns ErrNoIdentity.
//
// The tenant travels in Temporal headers from the client that starts the workflow (WithTenant and
// TenantPropagator), never in the activity's input.
//
// Key.Token is what an external system sees: 43 URL-safe characters hashed from all four parts
// (Token.UUID for APIs that want a UUID). Key.Compensation derives the key of a compensation
// from its forward step.
//
// FingerprintOf and FingerprintJSON hash a request's canonical JSON, so that the same key with a
// different request can be refused before anything is called. Struct tags on the request choose
// what counts:
//
//	type Charge struct {
//		Order       string    `json:"order"`
//		Amount      int64     `json:"amount"`
//		RequestedAt time.Time `json:"requested_at" tempotent:"-"` // differs on every attempt
//	}
//
// The options, comma-separated in one tag:
//
//   - `tempotent:"-"` leaves a field out: a retry that differs only in it replays the first
//     result. Leave out only what the effect does not depend on: with Amount left out, a retry
//     with another amount would replay the first charge instead of being refused.
//   - `tempotent:"intent"` on some fields of a struct makes them the only ones that count,
//     counting the fields promoted from its embedded structs as its own.
//   - A nil slice or map is the same request as an empty one, unless the field is tagged
//     `tempotent:"keepnil"`.
//
// An unknown option is an error, never ignored; so is intent on a field that encoding/json does
// not encode (unexported, json:"-", or a promoted field that another of the same JSON name
// shadows or conflicts with), which would leave out the field it does encode. A fingerprint carries the version of the way the
// request became JSON (FingerprintVersion): 1 when the tags and the nil rule made no difference, 2
// when they did. Compare a request's fingerprint with a stored one with Fingerprint.Matches, and
// with one recorded under another version by recomputing it with FingerprintAt. Receipts recorded
// before version 2 keep matching their retries that way, but the tags and the nil rule protect
// only intents recorded after the upgrade.
//
// A plain fingerprint is an unsalted hash: for a guessable request (an amount, an email address)
// whoever reads it can confirm a guess. Fingerprint.Keyed and KeyedFingerprintOf key it with a
// secret (HMAC-SHA256; version KeyedVersionBase+v, written "k2:<hex>"), and MatchesKeyed compares a
// request's plain fingerprint with a stored one, plain or keyed under any of several secrets. A
// store with activity.Config.FingerprintKeys does both itself.
//
// Malformed parts (empty, too long, NUL or control bytes, invalid UTF-8) are an
// *InvalidKeyError; a missing identity is ErrNoIdentity. Both are returned before anything is
// scheduled, written or called.
package keys
