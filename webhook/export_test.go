package webhook

import "time"

// SetTallyTimer has h schedule its tally flushes with after instead of time.AfterFunc, so that a
// test fires them itself. Call it before h serves a request.
func SetTallyTimer(h *Handler, after func(d time.Duration, f func()) (stop func() bool)) {
	h.tally.after = after
}
