// Package console is the operator's web console for tempotent: an http.Handler to mount in an
// admin server of your own, or to serve with `tempotent ui`. It shows what waits for a person
// (unresolved receipts, unknown outcomes, dead outbox messages), each receipt with what is known
// and what is safe to do, and the audit log; and it lets an operator resolve and re-arm
// receipts and requeue and discard dead messages, each with a required reason, recorded in the
// audit log under the signed-in user's name.
//
// It is built only on the library's own APIs (operator.Client, outbox.Outbox,
// inbox.Consumers), server-rendered with html/template, its stylesheet embedded: no script, no
// CDN, it works air-gapped.
//
//	op, _ := operator.NewClient(pool, operator.Config{Schema: "tempotent", Codecs: codecs})
//	out, _ := outbox.New(pool, &outbox.Config{Schema: "tempotent"})
//	h, err := console.New(console.Config{
//		Operator: op, Outbox: out, Inbox: pool, Path: "/tempotent/",
//		Users: []console.User{
//			{Name: "alice@example.com", Password: alicePassword, Role: console.RoleOperator},
//			{Name: "oncall-viewer", Password: viewerPassword, Role: console.RoleReader},
//		},
//	})
//	adminMux.Handle("/tempotent/", h)
//
// Security: every request authenticates with HTTP basic authentication (serve it over TLS, or
// on a loopback address), compared in constant time against Config.Users; only
// Config.InsecureLocalReader lets a request from a loopback address in without credentials,
// and then only to read. A reader sees every page but results, payloads and headers, and acts
// on nothing (403). An action is a POST that must come from the console's own origin (Origin
// and Sec-Fetch-Site, as http.CrossOriginProtection checks them) and carry the user's CSRF
// token, an HMAC of the user's credentials under Config.Secret; anything else is refused with
// 403 before anything changes. Every response forbids framing, sniffing, referrers and any
// source but the console's own (Content-Security-Policy default-src 'self').
package console
