// Package browsertest drives the console (package console) in a real headless Chromium, with
// chromedp: a receipt left unknown by an attempt that died after its effect appears on the
// overview, is resolved through the receipt's form, the audit line shows, and the next attempt
// replays the resolution. It is a module of its own so that chromedp stays out of tempotent's
// go.mod; it needs Debian's chromium (or CHROMIUM naming the browser's binary). With
// TEMPOTENT_SCREENSHOTS naming a directory, the test saves the pages it sees there as PNG.
package browsertest
