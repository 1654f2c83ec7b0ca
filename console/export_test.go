package console

import (
	"time"
)

// SetClock makes h's sign-in limiter read the time from now.
func SetClock(h *Handler, now func() time.Time) { h.signIns.now = now }

// SetSignInAddressesMax bounds how many addresses the sign-in limiters remember, until the test
// ends (restore is returned).
func SetSignInAddressesMax(n int) (restore func()) {
	old := signInAddressesMax
	signInAddressesMax = n
	return func() { signInAddressesMax = old }
}

// SignInAddresses is how many addresses h's sign-in limiter remembers.
func SignInAddresses(h *Handler) int {
	h.signIns.mu.Lock()
	defer h.signIns.mu.Unlock()
	return len(h.signIns.buckets)
}
