package activity

import "github.com/tempotent/tempotent/internal/engine"

// Call describes one execution of an intent for Do, DoInNewTx and DoInTx. Register and RegisterTx
// build it from the activity's context; build it yourself to use receipts outside Temporal.
type Call = engine.Call

// Options says what a registered activity's downstream guarantees. Its key is not among them:
// workflow code decides every activity's key (see the keys package). The zero Options treats the
// downstream as one that does not deduplicate. Its fields are Call's downstream properties
// (DownstreamDeduplicates; DownstreamKeyMemory, default 24 hours; DownstreamSettleTime, default a
// minute, which for a compensation should be the forward step's downstream's; Reconcile), and
// Batch, which declares an activity that makes its effects only through ForEach, each item under
// its own receipt: a takeover of its receipt after a crash runs it again (its settled items
// replay) instead of failing with an unknown outcome. WithDefaults returns the defaults applied.
type Options = engine.Options

// ReconcileFunc asks the downstream what happened under token. It returns the result the
// earlier attempt produced and found = true when the effect happened; found = false when it
// certainly did not (the function is then called); or an error. An error never settles the
// intent, whatever it is: the receipt keeps saying that an effect may have happened, and the
// attempt fails with a retryable ReconcileError, so that the next one asks again.
type ReconcileFunc = engine.ReconcileFunc
