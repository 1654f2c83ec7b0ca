// Package faults holds tempotent's fault tests: every row of FAULTS.md as a test against the
// real Temporal dev server, the real Postgres, fakepay as a process of its own and the worker as
// a subprocess killed, paused and restarted with real signals. Effects are counted in
// fakepay's ledger, the receipts table and the sample's tables, never in logs. The test binary
// builds the worker with -tags tempotent_failpoints, the only build in which the failpoints of
// internal/failpoint exist.
//
// It has no code of its own; run `make test` (or go test ./faults/) and `make chaos`.
package faults
