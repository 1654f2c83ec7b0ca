package activity

import "github.com/tempotent/tempotent/internal/engine"

// Call describes one execution of an intent for Do, DoInNewTx and DoInTx. Register and RegisterTx
// build it from the activity's context; build it yourself to use receipts outside Temporal. Its
// fields:
//
//   - Key names the intent. Required; validated before anything is written.
//   - Request is the request the intent makes (the activity's input), and Fingerprint its
//     fingerprint (keys.FingerprintOf, which honours the tempotent struct tags; zero means
//     computed from Request). A receipt under the same Key recorded for another fingerprint is a
//     payload mismatch; with Request, one recorded under an older fingerprint version is
//     compared under that version. Give Request, or Fingerprint, or both.
//   - Lease is how long this attempt holds the key before another may take over. Default: until
//     ctx's deadline, or a minute when it has none (capped by the heartbeat timeout).
//   - Attempt is which attempt this is, counting from 1, when the caller knows it; zero means
//     the Temporal activity's own. From the second on, Do reads the receipt first (one round
//     trip, nothing written).
//   - ScheduledAt arms the replay-horizon guard: a call scheduled longer ago than the retention
//     is refused with a HorizonError.
//   - DownstreamDeduplicates, DownstreamKeyMemory (default 24 hours, Stripe's) and
//     DownstreamSettleTime (default a minute) say what the downstream guarantees, and so whether
//     a takeover after an unknown outcome may call it again under the token.
//   - Reconcile asks the downstream what an earlier attempt did when calling again is not safe;
//     without it, such a takeover fails with OutcomeUnknownError.
//   - Authorize, when set, is asked before anything is reserved, run or replayed whether the
//     caller's tenant (keys.TenantFrom(ctx)) may run the intent or have its recorded result; it
//     takes precedence over Config.Authorize. See Config.Authorize.
//
// The type is defined in the engine (internal/engine), where each field's comment says more.
type Call = engine.Call

// Options says what a registered activity's downstream guarantees. Its key is not among them:
// workflow code decides every activity's key (see the keys package). The zero Options treats the
// downstream as one that does not deduplicate. Its fields are Call's downstream properties
// (DownstreamDeduplicates; DownstreamKeyMemory, default 24 hours; DownstreamSettleTime, default a
// minute, which for a compensation should be the forward step's downstream's; Reconcile), and
// Batch, which declares an activity that makes its effects only through ForEach, each item under
// its own receipt: a takeover of its receipt after a crash runs it again (its settled items
// replay) instead of failing with an unknown outcome; and Authorize, the activity's authorization
// hook, asked instead of Config.Authorize (see there). WithDefaults returns the defaults applied.
type Options = engine.Options

// ReconcileFunc asks the downstream what happened under token. It returns the result the
// earlier attempt produced and found = true when the effect happened; found = false when it
// certainly did not (the function is then called); or an error. An error never settles the
// intent, whatever it is: the receipt keeps saying that an effect may have happened, and the
// attempt fails with a retryable ReconcileError, so that the next one asks again.
type ReconcileFunc = engine.ReconcileFunc
