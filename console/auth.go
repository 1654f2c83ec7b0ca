// Who may do what: authentication, roles, CSRF and cross-origin checks, security headers.

package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
)

// anonymous is the reader that InsecureLocalReader lets in.
var anonymous = User{Name: "anonymous", Role: RoleReader}

type userKey struct{}

// userOf is the authenticated user of the request.
func userOf(ctx context.Context) credential {
	c, _ := ctx.Value(userKey{}).(credential)
	return c
}

// ServeHTTP serves the console. Every response carries the security headers. A request is
// answered 401 unless it authenticates (or InsecureLocalReader lets it read), and 429 when it
// carries credentials from an address past Config.FailedSignIns; a POST, the only
// method that acts, is answered 403 unless its user has RoleOperator, it comes from the
// console's own origin, and its form carries the user's CSRF token.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")

	if name, _, guess := r.BasicAuth(); guess {
		if wait, held := h.signIns.heldOff(clientOf(r.RemoteAddr), name); held {
			hd.Set("Retry-After", retryAfter(wait))
			http.Error(w, "429 too many failed sign-ins: try again in "+retryAfter(wait)+" s", http.StatusTooManyRequests)
			return
		}
	}
	user, ok := h.authenticate(r)
	if !ok {
		hd.Set("WWW-Authenticate", `Basic realm="tempotent console", charset="UTF-8"`)
		http.Error(w, "401 unauthorized: sign in as one of the console's users", http.StatusUnauthorized)
		return
	}
	rest, found := strings.CutPrefix(r.URL.Path, h.cfg.Path)
	if !found {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := h.mayAct(r, user); err != nil {
			http.Error(w, "403 forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	r2 := r.Clone(context.WithValue(r.Context(), userKey{}, user))
	r2.URL.Path = "/" + rest
	h.mux.ServeHTTP(w, r2)
}

// authenticate returns the user whose basic credentials the request carries. Every user's
// digests are compared, in constant time, whichever matches: the time taken says nothing about
// which name or how much of a password was right.
// A failure counts against the request's address (Config.FailedSignIns).
func (h *Handler) authenticate(r *http.Request) (credential, bool) {
	name, password, ok := r.BasicAuth()
	if !ok {
		if h.cfg.InsecureLocalReader && fromLoopback(r) {
			return credential{User: anonymous}, true
		}
		return credential{}, false
	}
	n, p := sha256.Sum256([]byte(name)), sha256.Sum256([]byte(password))
	var found credential
	match := 0
	for _, c := range h.users {
		same := subtle.ConstantTimeCompare(n[:], c.name[:]) & subtle.ConstantTimeCompare(p[:], c.password[:])
		if same == 1 {
			found = c
		}
		match |= same
	}
	if match != 1 {
		h.signIns.failed(clientOf(r.RemoteAddr), name)
	}
	return found, match == 1
}

// fromLoopback reports whether r came straight from a loopback address, through no proxy that
// says so.
func fromLoopback(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type forbidden string

func (f forbidden) Error() string { return string(f) }

// mayAct refuses a state-changing request that the user may not make, that another site's page
// sent, or whose form does not carry the user's CSRF token.
func (h *Handler) mayAct(r *http.Request, user credential) error {
	if r.Method != http.MethodPost {
		return forbidden("only POST acts")
	}
	if user.Role != RoleOperator {
		return forbidden(user.Name + " has the " + user.Role.String() + " role, which reads only")
	}
	if err := h.cross.Check(r); err != nil {
		return forbidden("the request came from another site's page")
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
	got := r.PostFormValue(csrfField)
	if !hmac.Equal([]byte(got), []byte(h.csrfToken(user))) {
		return forbidden("the form's CSRF token is missing or stale: reload the page and submit it again")
	}
	return nil
}

// maxFormBytes bounds an action's form.
const maxFormBytes = 1 << 20

// csrfField is the name of the forms' hidden CSRF field.
const csrfField = "csrf"

// csrfToken is the user's CSRF token: an HMAC, under the console's secret, of the user's name
// and password digest, so that another user's token, or one from before a password change or a
// new secret, is refused.
func (h *Handler) csrfToken(user credential) string {
	m := hmac.New(sha256.New, h.cfg.Secret)
	m.Write([]byte("tempotent console csrf\x00"))
	m.Write([]byte(user.Name))
	m.Write([]byte{0})
	m.Write(user.password[:])
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
