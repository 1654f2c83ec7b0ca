package console_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/console"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

// Every page and every action refuses a request without credentials, or with wrong ones, with
// 401 and a challenge, and nothing changes.
func TestNoCredentialsNoAccess(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.unknown("order-1")
	e.dead("HTTP 422", "paid/1")
	wrong := []*console.User{
		nil,
		{Name: alice.Name, Password: bob.Password},
		{Name: alice.Name, Password: alice.Password + "x"},
		{Name: alice.Name, Password: ""},
		{Name: "eve", Password: alice.Password},
	}
	paths := []string{"/", "/receipts", receiptPath(tok), "/outbox", messagePath("paid/1"), "/audit", "/static/console.css", "/nowhere"}
	for _, u := range wrong {
		for _, p := range paths {
			r := e.do(http.MethodGet, p, u, nil, nil)
			require.Equal(t, http.StatusUnauthorized, r.status, "GET %s as %v", p, u)
			require.Contains(t, r.header.Get("WWW-Authenticate"), "Basic")
		}
		r := e.do(http.MethodPost, receiptPath(tok)+"/resolve", u, form("outcome", "not-applied", "reason", "x"), e.sameOrigin())
		require.Equal(t, http.StatusUnauthorized, r.status)
		r = e.do(http.MethodPost, "/outbox/requeue", u, form("id", "paid/1", "reason", "x"), e.sameOrigin())
		require.Equal(t, http.StatusUnauthorized, r.status)
	}
	require.Zero(t, e.auditRows())
}

// A reader may read every page and act on nothing: each action is 403, even with the
// operator's CSRF token, and nothing changes.
func TestReaderCannotAct(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.unknown("order-1")
	failed := e.failed("refund-1", "blocked")
	e.dead("HTTP 422", "paid/1")
	token := e.csrf(receiptPath(tok), alice)
	for path, f := range map[string][]string{
		receiptPath(tok) + "/resolve":  {"outcome", "not-applied", "reason", "x", "csrf", token},
		receiptPath(failed) + "/rearm": {"reason", "x", "csrf", token},
		"/outbox/requeue":              {"id", "paid/1", "reason", "x", "csrf", token},
		"/outbox/discard":              {"id", "paid/1", "reason", "x", "csrf", token},
	} {
		r := e.do(http.MethodPost, path, &bob, form(f...), e.sameOrigin())
		require.Equal(t, http.StatusForbidden, r.status, "POST %s as the reader: %s", path, r.body)
	}
	require.Zero(t, e.auditRows())

	// A user demoted to reader while a form with a valid token is open in the browser: the role,
	// not only the token, refuses the action.
	demoted := bob
	demoted.Role = console.RoleOperator
	before, err := console.New(console.Config{Operator: e.op, Users: []console.User{demoted}, Secret: []byte("kept secret")})
	require.NoError(t, err)
	e.srv.Config.Handler = before
	bobToken := e.csrf(receiptPath(tok), demoted)
	after, err := console.New(console.Config{Operator: e.op, Users: []console.User{bob}, Secret: []byte("kept secret")})
	require.NoError(t, err)
	e.srv.Config.Handler = after
	r := e.do(http.MethodPost, receiptPath(tok)+"/resolve", &bob, form("outcome", "not-applied", "reason", "x", "csrf", bobToken), e.sameOrigin())
	require.Equal(t, http.StatusForbidden, r.status, "a reader acted with a token from when it was an operator")
	require.Contains(t, r.body, "reads only")
	require.Zero(t, e.auditRows())

	m, err := e.out.Get(context.Background(), "paid/1")
	require.NoError(t, err)
	require.Equal(t, outbox.StateDead, m.State)
}

// An action without the user's CSRF token, or from another site's page, is 403 and changes
// nothing.
func TestCSRFAndCrossOriginRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.unknown("order-1")
	token := e.csrf(receiptPath(tok), alice)
	cases := map[string]struct {
		csrf   string
		header map[string]string
	}{
		"MissingToken":      {"", e.sameOrigin()},
		"WrongToken":        {strings.Repeat("A", len(token)), e.sameOrigin()},
		"TruncatedToken":    {token[:len(token)-1], e.sameOrigin()},
		"CrossSite":         {token, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}},
		"CrossOriginOnly":   {token, map[string]string{"Origin": "https://evil.example"}},
		"SameSiteNotOrigin": {token, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "https://other.example.com"}},
	}
	for name, c := range cases {
		r := e.do(http.MethodPost, receiptPath(tok)+"/resolve", &alice, form("csrf", c.csrf, "outcome", "not-applied", "reason", "x"), c.header)
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", name, r.body)
	}
	// PUT, DELETE and the like never act.
	r := e.do(http.MethodPut, receiptPath(tok)+"/resolve", &alice, form("csrf", token, "outcome", "not-applied", "reason", "x"), e.sameOrigin())
	require.Equal(t, http.StatusForbidden, r.status)
	require.Zero(t, e.auditRows())
	got, err := e.op.Receipt(context.Background(), tok)
	require.NoError(t, err)
	require.True(t, got.Unresolved)
}

// The CSRF token of one console's secret is refused by another's, and a user's by another user.
func TestCSRFTokenBoundToSecretAndUser(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tok := e.unknown("order-1")
	// carol has alice's password: the token is bound to the name too.
	carol := console.User{Name: "carol@example.com", Password: alice.Password, Role: console.RoleOperator}
	h, err := console.New(console.Config{Operator: e.op, Users: []console.User{alice, carol}, Secret: []byte("secret one")})
	require.NoError(t, err)
	e.srv.Config.Handler = h
	aliceToken := e.csrf(receiptPath(tok), alice)
	require.NotEqual(t, aliceToken, e.csrf(receiptPath(tok), carol))
	r := e.do(http.MethodPost, receiptPath(tok)+"/resolve", &carol, form("csrf", aliceToken, "outcome", "not-applied", "reason", "x"), e.sameOrigin())
	require.Equal(t, http.StatusForbidden, r.status, "carol acted with alice's token")

	h2, err := console.New(console.Config{Operator: e.op, Users: []console.User{alice, carol}, Secret: []byte("secret two")})
	require.NoError(t, err)
	e.srv.Config.Handler = h2
	r = e.do(http.MethodPost, receiptPath(tok)+"/resolve", &alice, form("csrf", aliceToken, "outcome", "not-applied", "reason", "x"), e.sameOrigin())
	require.Equal(t, http.StatusForbidden, r.status, "a token of another secret was taken")
	require.Zero(t, e.auditRows())
}

// TestExploreAccess sends seeded random requests — who (nobody, the operator, the reader, a
// wrong password, an unknown user), method, page or action and its target, CSRF token, origin
// — and checks each answer against a model of who may do what, and after each that the audit
// log holds exactly the actions the model let through; at the end, that each target is in the
// state the model says. TEMPOTENT_EXPLORE_SEED (default 1) and TEMPOTENT_EXPLORE_CONSOLE_N
// (default 300 requests) choose the history; a failure prints its seed and request.
func TestExploreAccess(t *testing.T) {
	t.Parallel()
	seed := envInt("TEMPOTENT_EXPLORE_SEED", 1)
	n := envInt("TEMPOTENT_EXPLORE_CONSOLE_N", 300)
	e := setup(t)
	type target struct {
		kind string // "resolve", "rearm", "message"
		id   string // the receipt's token or the message's ID
		done bool
		gone bool // a discarded message: actions on it are 404
	}
	var targets []*target
	for i := range 3 {
		targets = append(targets, &target{kind: "resolve", id: string(e.unknown(fmt.Sprintf("unknown-%d", i)))})
		targets = append(targets, &target{kind: "rearm", id: string(e.failed(fmt.Sprintf("failed-%d", i), "refused"))})
	}
	var ids []string
	for i := range 4 {
		ids = append(ids, fmt.Sprintf("paid/%d", i))
		targets = append(targets, &target{kind: "message", id: ids[i]})
	}
	e.dead("HTTP 422", append(ids, "shown")...) // "shown" is read, never acted on
	token := e.csrf(receiptPath(keys.Token(targets[0].id)), alice)
	pages := []string{"/", "/receipts", "/receipts?state=unresolved", receiptPath(keys.Token(targets[1].id)), "/outbox", messagePath("shown"), "/audit", "/static/console.css"}
	wrongPassword := console.User{Name: alice.Name, Password: bob.Password}
	stranger := console.User{Name: "eve@example.com", Password: alice.Password}
	users := []*console.User{nil, &alice, &bob, &wrongPassword, &stranger}
	csrfs := []string{token, "", token[:len(token)-2] + "AA", "not-a-token"}
	origins := []map[string]string{nil, e.sameOrigin(), {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, {"Origin": "https://evil.example"}}
	rng := rand.New(rand.NewPCG(uint64(seed), 41))
	actions := 0
	seen := map[int]int{}
	for i := range n {
		// Weighted so that requests the model lets through are common enough to run out of
		// targets: alice 6 in 13, POST half, an action 2 in 3, a valid token and origin most of the time.
		u := users[pick(rng, 2, 6, 3, 1, 1)]
		method := []string{http.MethodGet, http.MethodPost, http.MethodPut}[pick(rng, 4, 5, 1)]
		csrf := csrfs[pick(rng, 8, 1, 1, 1)]
		origin := origins[pick(rng, 3, 5, 1, 1)]
		var path string
		var tg *target
		discard := false
		f := form("csrf", csrf, "reason", fmt.Sprintf("request %d", i))
		if rng.IntN(3) == 0 {
			path = pages[rng.IntN(len(pages))]
		} else {
			tg = targets[rng.IntN(len(targets))]
			switch tg.kind {
			case "resolve":
				path = receiptPath(keys.Token(tg.id)) + "/resolve"
				f.Set("outcome", "not-applied")
			case "rearm":
				path = receiptPath(keys.Token(tg.id)) + "/rearm"
			default:
				discard = rng.IntN(2) == 0
				path = "/outbox/requeue"
				if discard {
					path = "/outbox/discard"
				}
				f.Set("id", tg.id)
			}
		}

		// The model.
		want := 0
		switch {
		case u != &alice && u != &bob:
			want = http.StatusUnauthorized
		case method == http.MethodGet && tg == nil:
			want = http.StatusOK
		case method == http.MethodGet:
			want = http.StatusMethodNotAllowed
		case method != http.MethodPost, u == &bob, origin != nil && origin["Origin"] != e.srv.URL, csrf != token:
			want = http.StatusForbidden
		case tg == nil:
			want = http.StatusMethodNotAllowed
		case tg.gone:
			want = http.StatusNotFound
		case tg.done:
			want = http.StatusConflict
		default:
			want = http.StatusSeeOther
			tg.done, tg.gone = true, discard
			actions++
		}

		var body map[string][]string
		if method != http.MethodGet {
			body = f
		}
		r := e.do(method, path, u, body, origin)
		who := "nobody"
		if u != nil {
			who = u.Name + ":" + u.Password
		}
		require.Equal(t, want, r.status, "seed %d request %d: %s %s as %s, csrf %q, origin %v: %s\nreplay: TEMPOTENT_EXPLORE_SEED=%d go test -run TestExploreAccess ./console/",
			seed, i, method, path, who, csrf, origin, r.body, seed)
		seen[want]++
		require.Equal(t, actions, e.auditRows(), "seed %d request %d: the audit log does not hold exactly the actions let through", seed, i)
	}
	ctx := context.Background()
	for _, tg := range targets {
		switch tg.kind {
		case "message":
			m, err := e.out.Get(ctx, tg.id)
			if tg.gone {
				require.ErrorIs(t, err, outbox.ErrNoMessage, "message %s was not discarded", tg.id)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, tg.done, m.State != outbox.StateDead, "message %s", tg.id)
		default:
			r, err := e.op.Receipt(ctx, keys.Token(tg.id))
			require.NoError(t, err)
			require.Equal(t, tg.done, r.ResolvedAt != nil, "receipt %s is %s, resolved by %q", tg.id, r.Status, r.ResolvedBy)
			if tg.done {
				require.Equal(t, alice.Name, r.ResolvedBy)
				require.Equal(t, tg.kind == "rearm", r.Rearmed())
			} else {
				require.True(t, r.Unresolved || r.Status == operator.StatusFailed)
			}
		}
	}
	if n >= 300 {
		for _, status := range []int{http.StatusOK, http.StatusSeeOther, http.StatusUnauthorized, http.StatusForbidden, http.StatusMethodNotAllowed, http.StatusConflict} {
			require.NotZero(t, seen[status], "seed %d: no request was answered %d; the history explored too little", seed, status)
		}
	}
	t.Logf("explore: %d requests from seed %d, answered by status %v, each as the model said", n, seed, seen)
}

// pick returns an index drawn with the given weights.
func pick(rng *rand.Rand, weights ...int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	x := rng.IntN(total)
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	return len(weights) - 1
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
