// Package saga runs sagas in Temporal workflows whose compensations have their own idempotent
// keys.
//
// A payment saga charges, reserves, ships; when a later step fails it refunds, releases, cancels.
// Registering a compensation only after its forward activity succeeded (the usual defer
// pattern) misses the charge that took effect but timed out, and nothing stops a refund from
// being issued twice. A Saga instead:
//
//   - registers each step's compensation before the forward activity runs, so a step with an
//     unknown outcome is compensated too;
//   - keys each forward step with keys.StepKey (workflow ID + the run's epoch + step name +
//     occurrence, or the scope ctx asks for) and each compensation with Key.Compensation of it,
//     so activity retries, replays, Reset and workflow retries reuse the same keys and the activity package's receipts turn repeats into
//     replays;
//   - waits for a forward activity to settle before compensating it, so a refund never
//     overtakes its charge;
//   - runs compensations in reverse order (or in parallel) with a retry policy that keeps
//     trying; one that fails for good stops none of the others, and every one that did not
//     complete is named in a *CompensationError;
//   - runs a failed compensation again when the workflow calls Compensate again, once an
//     operator has fixed the cause and re-armed its receipt (tempotent receipts rearm,
//     operator.Client.Rearm): under the same key, while the completed ones are not run again;
//   - answers a query (QueryTypeDefault) with steps, tokens, outcomes and compensation states.
//
// Keys travel in Temporal headers: no key parameter appears in an activity's signature. Install
// the activity package's interceptor (activity.NewInterceptor) on the worker.
//
//	func Payment(ctx workflow.Context, o Order) error {
//		s, err := saga.New(ctx, nil)
//		if err != nil {
//			return err
//		}
//		for _, step := range []struct{ name, do, undo string }{
//			{"charge", "Charge", "Refund"}, {"reserve", "Reserve", "Release"}, {"ship", "Ship", "CancelShipment"},
//		} {
//			if err := s.Step(ctx, step.name, saga.Compensation{Activity: step.undo, Args: []any{o}}, step.do, o).Get(ctx, nil); err != nil {
//				return errors.Join(err, s.Compensate(ctx))
//			}
//		}
//		s.Complete()
//		return nil
//	}
//
// The contract a compensation activity must meet is in Compensation's documentation: it may run
// for a step whose forward effect never happened, and must then succeed without doing anything.
package saga
