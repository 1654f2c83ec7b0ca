package activitytest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"
)

// FaultProxy is an HTTP proxy for tests (an httptest.Server) in front of a downstream of your
// own — a fake, a provider's sandbox — that fails the requests you ask it to as the network
// between a worker and a provider does: a 500 before the request reaches the downstream, a 500
// or a dropped connection after the downstream applied it, a slow answer. Point the activity at
// URL instead of the downstream, and give the proxy to Check.Faults.
type FaultProxy struct {
	// URL is the proxy's base URL: a request to URL+path goes to the target's path.
	URL string

	slowFor time.Duration
	proxy   *httputil.ReverseProxy
	faultQueue
}

// NewFaultProxy starts a proxy to target (a base URL such as an httptest.Server's), closed when
// tb ends. A Slow fault holds a request for 2 seconds, or until its caller gives up.
func NewFaultProxy(tb testing.TB, target string) *FaultProxy {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		tb.Fatalf("activitytest: NewFaultProxy needs the downstream's base URL (http://host:port), got %q", target)
	}
	p := &FaultProxy{slowFor: 2 * time.Second, proxy: httputil.NewSingleHostReverseProxy(u)}
	if url, ok := inherited(tb, "proxy"); ok {
		p.URL = url // a worker process (see process.go) goes through the first process's proxy
		return p
	}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	tb.Cleanup(srv.Close)
	p.URL = srv.URL
	remember(tb, "proxy", p.URL)
	return p
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	switch fault := p.next(); fault {
	case Fail500BeforeEffect:
		writeJSON(w, http.StatusInternalServerError, `{"error":{"type":"api_error","message":"injected by activitytest.FaultProxy: 500 before the request reached the downstream"}}`)
		return
	case Slow:
		select {
		case <-time.After(p.slowFor):
		case <-r.Context().Done():
			return // the caller gave up; nothing forwarded
		}
	case Fail500AfterEffect, DropAfterEffect:
		// The downstream applies the request in full, whatever its caller does meanwhile; then
		// the answer is lost.
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
		if fault == DropAfterEffect {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		writeJSON(w, http.StatusInternalServerError, `{"error":{"type":"api_error","message":"injected by activitytest.FaultProxy: 500 after the downstream applied the request"}}`)
		return
	}
	p.proxy.ServeHTTP(w, r)
}
