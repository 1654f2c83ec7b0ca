package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/console"
)

// signInConsole is a console with alice, its sign-in limiter on a clock the test moves.
func signInConsole(t *testing.T, limit console.SignInLimit) (*console.Handler, *time.Time) {
	t.Helper()
	e := setup(t)
	// A fixed secret: the spill buckets the names fall into are the same in every run.
	h, err := console.New(console.Config{Operator: e.op, Users: []console.User{alice}, FailedSignIns: limit,
		Secret: []byte("sign-in tests' secret, 32 bytes.")})
	require.NoError(t, err)
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	console.SetClock(h, func() time.Time { return now })
	return h, &now
}

// signIn sends a GET of the overview from addr, as name with password ("" sends none), and
// returns the response.
func signIn(h http.Handler, addr, name, password string) *http.Response {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = addr
	if name != "" {
		r.SetBasicAuth(name, password)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// An address that keeps guessing gets Burst tries, then one per Every; while it is held off
// even the right password is refused unchecked, and other addresses sign in as ever.
func TestFailedSignInsAreHeldOff(t *testing.T) {
	t.Parallel()
	h, now := signInConsole(t, console.SignInLimit{Burst: 3, Every: time.Minute})
	const guesser = "203.0.113.7:40000"
	for i := range 3 {
		require.Equal(t, http.StatusUnauthorized, signIn(h, guesser, alice.Name, fmt.Sprint("guess-", i)).StatusCode)
	}
	held := signIn(h, guesser, alice.Name, "guess-3")
	require.Equal(t, http.StatusTooManyRequests, held.StatusCode)
	require.Equal(t, "60", held.Header.Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, signIn(h, "203.0.113.7:40001", alice.Name, alice.Password).StatusCode,
		"the right password was checked while the address was held off")
	require.Equal(t, http.StatusUnauthorized, signIn(h, guesser, "", "").StatusCode, "a request without credentials is not a guess")

	require.Equal(t, http.StatusOK, signIn(h, "203.0.113.8:40000", alice.Name, alice.Password).StatusCode, "another address was held off")

	*now = now.Add(30 * time.Second)
	held = signIn(h, guesser, alice.Name, alice.Password)
	require.Equal(t, http.StatusTooManyRequests, held.StatusCode)
	require.Equal(t, "30", held.Header.Get("Retry-After"))
	*now = now.Add(30 * time.Second)
	require.Equal(t, http.StatusOK, signIn(h, guesser, alice.Name, alice.Password).StatusCode, "the address got no try back after Every")
	require.Equal(t, http.StatusUnauthorized, signIn(h, guesser, alice.Name, "guess-4").StatusCode)
	require.Equal(t, http.StatusTooManyRequests, signIn(h, guesser, alice.Name, "guess-5").StatusCode, "one try came back, not more")
}

// IPv6 clients are limited by their /64, which one host can fill with addresses of its own.
func TestFailedSignInsCountByIPv6Prefix(t *testing.T) {
	t.Parallel()
	h, _ := signInConsole(t, console.SignInLimit{Burst: 2, Every: time.Minute})
	require.Equal(t, http.StatusUnauthorized, signIn(h, "[2001:db8:1:2::1]:1", alice.Name, "guess-1").StatusCode)
	require.Equal(t, http.StatusUnauthorized, signIn(h, "[2001:db8:1:2::ffff]:1", alice.Name, "guess-2").StatusCode)
	require.Equal(t, http.StatusTooManyRequests, signIn(h, "[2001:db8:1:2:aaaa::9]:1", alice.Name, alice.Password).StatusCode)
	require.Equal(t, http.StatusOK, signIn(h, "[2001:db8:1:3::1]:1", alice.Name, alice.Password).StatusCode)
}

// The limiter remembers a bounded number of addresses: past it, those it cannot forget (still
// short of tries) stay remembered and new addresses share a bucket for the name they sign in
// as, so a guesser cannot escape the limit, nor grow the map, by changing address.
func TestSignInLimiterIsBounded(t *testing.T) {
	defer console.SetSignInAddressesMax(4)()
	h, now := signInConsole(t, console.SignInLimit{Burst: 2, Every: time.Minute})
	for i := range 40 {
		signIn(h, fmt.Sprintf("198.51.100.%d:1", i), alice.Name, "guess")
		require.LessOrEqual(t, console.SignInAddresses(h), 4)
	}
	require.Equal(t, http.StatusTooManyRequests, signIn(h, "198.51.100.200:1", alice.Name, alice.Password).StatusCode,
		"a fresh address escaped the limit once the limiter was full")
	// Once the remembered addresses have their tries back, they are forgotten to make room.
	*now = now.Add(2 * time.Minute)
	require.Equal(t, http.StatusOK, signIn(h, "198.51.100.201:1", alice.Name, alice.Password).StatusCode)
	signIn(h, "198.51.100.202:1", alice.Name, "guess")
	require.Equal(t, 1, console.SignInAddresses(h), "the refilled addresses were not forgotten")
}

// A guesser who keeps the limiter full from many addresses drains only the spill buckets of the
// names he guesses: a user signing in from a new address is let in. Guessing a user's name
// drains that name's bucket, and holds off sign-ins as that user from new addresses.
func TestAFullLimiterHoldsOffOnlyTheNamesGuessed(t *testing.T) {
	defer console.SetSignInAddressesMax(4)()
	h, _ := signInConsole(t, console.SignInLimit{Burst: 2, Every: time.Minute})
	for i := range 40 {
		signIn(h, fmt.Sprintf("198.51.100.%d:1", i), fmt.Sprint("admin-", i%3), "guess")
	}
	require.Equal(t, 4, console.SignInAddresses(h))
	require.Equal(t, http.StatusTooManyRequests, signIn(h, "198.51.100.100:1", "admin-1", "guess").StatusCode,
		"a guessed name escaped the limit from a fresh address")
	require.Equal(t, http.StatusOK, signIn(h, "198.51.100.101:1", alice.Name, alice.Password).StatusCode,
		"a guesser who does not know alice's name locked her out")

	for i := range 3 {
		signIn(h, fmt.Sprintf("198.51.100.%d:1", 110+i), alice.Name, "guess")
	}
	require.Equal(t, http.StatusTooManyRequests, signIn(h, "198.51.100.120:1", alice.Name, alice.Password).StatusCode,
		"guesses at alice's name from fresh addresses escaped the limit")
	require.Equal(t, http.StatusOK, signIn(h, "198.51.100.2:1", alice.Name, alice.Password).StatusCode,
		"a remembered address with tries left was held off")
}

// With the limiter full, the answer to a sign-in from a new address does not tell a user's
// name from another: a name that is not a user's and a user's, neither guessed before, are
// answered alike, whichever names the guesser drained.
func TestAFullLimiterDoesNotTellUsersNames(t *testing.T) {
	defer console.SetSignInAddressesMax(4)()
	h, _ := signInConsole(t, console.SignInLimit{Burst: 2, Every: time.Minute})
	for i := range 4 {
		signIn(h, fmt.Sprintf("198.51.100.%d:1", i), "filler", "guess")
	}
	for i := range 3 {
		signIn(h, fmt.Sprintf("203.0.113.%d:1", i), "nobody", "guess")
	}
	probe := func(i int, name string) int {
		return signIn(h, fmt.Sprintf("203.0.113.%d:1", 100+i), name, "guess").StatusCode
	}
	require.Equal(t, http.StatusTooManyRequests, probe(0, "nobody"), "the drained name was not held off")
	require.Equal(t, http.StatusUnauthorized, probe(1, "bob-not-a-user"))
	require.Equal(t, http.StatusUnauthorized, probe(2, alice.Name), "a user's name is answered apart from another name")
}

// A negative Burst turns the limit off.
func TestSignInLimitOff(t *testing.T) {
	t.Parallel()
	h, _ := signInConsole(t, console.SignInLimit{Burst: -1})
	for i := range 50 {
		require.Equal(t, http.StatusUnauthorized, signIn(h, "203.0.113.9:1", alice.Name, fmt.Sprint("guess-", i)).StatusCode)
	}
	require.Equal(t, http.StatusOK, signIn(h, "203.0.113.9:1", alice.Name, alice.Password).StatusCode)
}
