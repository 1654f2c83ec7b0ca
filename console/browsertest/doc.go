// Package browsertest drives the console (package console) in a real headless Chromium, with
// chromedp, against a real worker: a worker process (the test binary, re-run) charges and is
// killed with SIGKILL before its receipt, on the Temporal dev server and the real Postgres; the
// receipt the next worker's attempt leaves unknown appears on the overview, is resolved through
// the receipt's form, the audit line shows, and the workflow's next run replays the resolution. It is a module of its own so that chromedp stays out of tempotent's
// go.mod; it needs Debian's chromium (or CHROMIUM naming the browser's binary). With
// TEMPOTENT_SCREENSHOTS naming a directory, the test saves the pages it sees there as PNG.
package browsertest
