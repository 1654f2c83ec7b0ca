// Package activitytest lets you prove, in your own tests, that your activities are safe to
// retry: that every way Temporal runs an activity more than once has one effect per intent. Its
// functions take a testing.TB, call tb.Helper, and fail with a message that says which path
// broke and what was counted, as river's rivertest does.
//
//   - NewStore is a receipt store on the real Postgres (TEST_DATABASE_URL, or
//     postgres://postgres@127.0.0.1:5432/postgres), in a fresh schema per test that is migrated
//     and dropped when the test ends. A database that does not answer fails the test with how to
//     start one: a check that skips itself proves nothing.
//   - RequireRetrySafe runs your activity through a crash before report, a crash after the
//     effect before the receipt, a timeout while the first attempt still runs, the same crash
//     followed by the intent's attempt in a new run (a reset), a failure after the effect (a
//     500, a dropped connection) followed by Temporal's retries, and a different payload under
//     the same key, and counts the effects with the function you give. Each attempt runs on the
//     SDK's TestActivityEnvironment with tempotent's interceptor, registered with
//     activity.Register, so the path under test is the one your worker runs; the key is given
//     with keys.Given (an activity environment has no workflow to decide it), one per path, and
//     activity.GetInfo reports what Temporal changes between attempts: the attempt number, the
//     task token, and on a reset the run and activity ID. What a crash needs that the SDK
//     cannot do — hold an attempt after its function returned, end its lease — the check does
//     to the attempt and to the store.
//     A batch activity (activity.ForEach) declares its items with Check.Items and
//     Check.ItemEffects instead of Effects, and is counted per item on every path: each item of
//     an intent must have exactly one effect, and a failure names the items that had none or
//     more than one.
//   - Downstream is a recording HTTP downstream (httptest) that counts requests and effects per
//     Idempotency-Key, deduplicates like Stripe (comparing a repeated key's request: another one
//     gets 400 idempotency_error) or not at all, and answers with faults: a 500 before or after
//     the effect, a dropped connection after it, a slow answer. FaultProxy injects the same
//     faults in front of a downstream of your own.
//   - RequireReceipt and RequireNoReceipt assert a receipt's status, result and attempts by
//     token (k.Token() for a key), through operator.Client.Receipt, without SQL; NewOperator
//     gives a test an operator client on a store's receipts.
//   - RequireRetrySafeTx is the same for an activity registered with activity.RegisterTx, whose
//     effect is its writes: a crash before report, an attempt that fails after its writes (its
//     transaction must roll them back — writes through a connection of the activity's own do
//     not), a second attempt while the first has not committed, another payload.
//   - RequireResetSafe runs the reset path on a real Temporal server (see below).
//   - RequireConsumedOnce proves that an inbox consumer (package inbox) processes a message
//     once: it delivers messages again, at once, and with the commit after the handler's effect
//     crashed (its connection terminated, its context cancelled), and wants one effect per
//     message and the inbox's record of it. NewSchema gives the consumer a schema with
//     tempotent's tables, on the real Postgres.
//   - NewActivityEnv is the SDK's TestActivityEnvironment with tempotent's interceptor and an intent
//     (keys.Given) unique to the test unless the test names one.
//   - NewWorkflowEnv is the SDK's TestWorkflowEnvironment with tempotent's interceptor and
//     tenant propagator installed and a workflow ID unique to the test; CrashBeforeReport makes
//     the next attempt of a named activity fail after its receipt was written, as a worker that
//     died before reporting, so that the workflow's retry must replay it.
//
// Keys that collide between test cases: the SDK's test environments give every workflow the
// same workflow and run IDs, so two tests that share a store derive the same keys, and the
// second one gets the first one's result, or a PayloadMismatch. Use a store per test (NewStore),
// or NewWorkflowEnv's unique workflow ID, or keys.Given with an ID of the test's own.
//
// Errors that cross into Temporal lose their Go chain: an activity's error reaches the workflow,
// and a test environment's caller, as a *temporal.ApplicationError. Match tempotent's errors by
// their type (activity.ErrTypePayloadMismatch, activity.ErrTypeOutcomeUnknown, …) with
// errors.As and Type(), not with errors.Is on the package's sentinels, which only Do's direct
// callers see.
//
// A workflow Reset (the same workflow scope under a new run ID) needs a real server: the SDK's
// test environments have one run ID. RequireResetSafe runs that path on one (NewDevServer
// starts the dev server): the worker dies after the effect, an operator resets the workflow,
// and the reset run's attempt takes the receipt over. An activity that builds its key from the
// run ID passes a retry in one run and charges again after a reset.
//
// Two of the paths guard the registration more than the activity's code: a crash before
// report and another payload under the same key are answered by the receipt whatever the
// activity does; they fail when the options or the store do not protect it. The takeover paths
// (a crash after the effect, a timeout, a reset) and the failure after the effect are where the
// activity's own key, and its reading of errors, must hold.
//
// A takeover after a crash runs in a worker process of its own (the test binary, running the
// same test again), so that nothing the first attempt kept in memory survives it, as nothing
// survives a worker that died. The test's stores, Downstreams and FaultProxies are shared with
// that process; a fake kept in memory is not. docs/testing.md says what each check proves and
// what none can.
package activitytest
