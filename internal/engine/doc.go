// Package engine is the receipts machinery behind the activity package: the state machines that
// make an activity's effect happen once per intent, the statements they send, and the group
// commits that share those statements between attempts. activity is its face: it keeps the typed
// entry points (Register, Do, DoInNewTx, DoInTx, ForEach), and aliases the types the engine
// creates (Config, Call, Options, the error types), so this package can change freely.
//
// A Call walked through activity.Do reads top to bottom:
//
//   - do.go: Store.Do checks the call (receipt.go), asks the authorization hook
//     (authorize.go; every path asks it before its first receipt statement), reserves its key or reads its receipt
//     (reserve.go, whose reservations go out in group commits: group.go), answers a finished
//     receipt with its replay, waits for or refuses a live attempt, and takes over an ended lease;
//   - run.go: run calls the function under the receipt's lease (lease.go; reconciling first when
//     an earlier attempt may have had its effect), and finish records the outcome (complete.go,
//     group-committed too) or releases the lease; a fenced-out attempt answers with what the
//     attempt that took over recorded.
//
// dotx.go is the transactional paths (DoInNewTx, DoInTx); batch.go and items.go are ForEach's
// core; compensate.go is ForwardSettled; sql.go and exec.go the statements and how they are
// sent, fence.go the tenant fence a sharded store's statements check; observe.go the counters,
// logs and spans (named by the telemetry package); errors.go the typed
// errors and how they cross into Temporal; interceptor.go the worker interceptor whose heartbeat
// hook extends leases; operator.go what the operator's side (listing, resolving, purging
// receipts) uses of the engine.
//
// The engine imports nothing of the packages above it. Its tests run the receipts explorer
// (TestExploreReceipts) and drive activity's Purge, Unresolved and Partition through
// operator_test.go, an external test file of the same test binary.
package engine
