// The pages: what each reads through the library's APIs, and the actions' forms.

package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

func (h *Handler) routes() {
	h.mux.Handle("GET /static/", h.static)
	h.mux.HandleFunc("GET /{$}", h.page("overview", h.overview))
	h.mux.HandleFunc("GET /receipts", h.page("receipts", h.receipts))
	h.mux.HandleFunc("GET /receipts/{token}", h.page("receipt", h.receipt))
	h.mux.HandleFunc("POST /receipts/{token}/resolve", h.action(h.resolve))
	h.mux.HandleFunc("POST /receipts/{token}/rearm", h.action(h.rearm))
	h.mux.HandleFunc("GET /audit", h.page("audit", h.audit))
	if h.cfg.Outbox != nil {
		h.mux.HandleFunc("GET /outbox", h.page("outbox", h.outboxList))
		h.mux.HandleFunc("GET /outbox/message", h.page("message", h.message))
		h.mux.HandleFunc("POST /outbox/requeue", h.action(h.requeue))
		h.mux.HandleFunc("POST /outbox/discard", h.action(h.discard))
	}
}

func (h *Handler) parseTemplates() error {
	funcs := template.FuncMap{
		"ago": func(t time.Time) string { return time.Since(t).Round(time.Second).String() + " ago" },
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"dur": func(d time.Duration) string { return d.Round(time.Second).String() },
		"str": func(b []byte) string { return string(b) },
	}
	for _, name := range []string{"overview", "receipts", "receipt", "outbox", "message", "audit", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("console: parse the %s page: %w", name, err)
		}
		h.pages[name] = t
	}
	return nil
}

// view is what every page's template gets: who reads it, the action forms' CSRF token, the
// handler's path (links are built on it), and the page's own data.
type view struct {
	Title    string
	Base     string
	User     User
	Operator bool
	CSRF     string
	Outbox   bool
	Data     any
}

// page serves a page whose data load reads.
func (h *Handler) page(name string, load func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := load(r)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		h.render(w, r, http.StatusOK, name, data)
	}
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	user := userOf(r.Context())
	v := view{Title: name, Base: h.cfg.Path, User: user.User, Operator: user.Role == RoleOperator, Outbox: h.cfg.Outbox != nil, Data: data}
	if v.Operator {
		v.CSRF = h.csrfToken(user)
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		http.Error(w, "500: render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders err on the error page, with its status.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.render(w, r, statusOf(err), "error", err.Error())
}

// action serves a POST that acts; mayAct has checked role, origin and CSRF token. do returns
// the page to go to once done.
func (h *Handler) action(do func(r *http.Request, by string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		next, err := do(r, userOf(r.Context()).Name)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		http.Redirect(w, r, h.cfg.Path+next, http.StatusSeeOther)
	}
}

// receiptsData is the receipts page's.
type receiptsData struct {
	State, Tenant, Operation string
	HasTenant                bool
	Page                     operator.Page
	States                   []string
	NextQuery                string
}

func (h *Handler) receipts(r *http.Request) (any, error) {
	q := r.URL.Query()
	d := receiptsData{State: q.Get("state"), Tenant: q.Get("tenant"), Operation: q.Get("operation"), HasTenant: q.Has("tenant") && q.Get("tenant") != "",
		States: []string{"", operator.FilterUnresolved, operator.FilterUnknown, operator.FilterLeaseEnded, operator.StatePending, operator.StateCompleted, operator.StateFailed}}
	f := operator.Filter{State: d.State, Operation: d.Operation, Limit: h.cfg.PageSize, After: q.Get("after")}
	if d.HasTenant {
		f.Tenant = &d.Tenant
	}
	page, err := h.cfg.Operator.Receipts(r.Context(), f)
	if errors.Is(err, operator.ErrInvalidFilter) {
		return nil, &errStatus{http.StatusBadRequest, err}
	}
	if err != nil {
		return nil, err
	}
	d.Page = page
	if page.Next != "" {
		q.Set("after", page.Next)
		d.NextQuery = q.Encode()
	}
	return d, nil
}

// receiptData is a receipt's page's.
type receiptData struct {
	R operator.Receipt
	// Known and Safe say what the receipt shows and what may be done about it.
	Known, Safe string
	CanResolve  bool
	CanRearm    bool
	Audit       []operator.AuditEntry
}

func (h *Handler) receipt(r *http.Request) (any, error) {
	tok := keys.Token(r.PathValue("token"))
	rec, err := h.cfg.Operator.Receipt(r.Context(), tok)
	if errors.Is(err, operator.ErrNoReceipt) {
		return nil, &errStatus{http.StatusNotFound, err}
	}
	if err != nil {
		return nil, err
	}
	if userOf(r.Context()).Role != RoleOperator {
		// A result may hold personal data: it never leaves the server for a reader.
		rec.Result = nil
		for i := range rec.Compensations {
			rec.Compensations[i].Result = nil
		}
	}
	audit, err := h.cfg.Operator.Audit(r.Context(), tok)
	if err != nil {
		return nil, err
	}
	d := receiptData{R: rec, Audit: audit, CanResolve: rec.Unresolved, CanRearm: rec.Status == operator.StatusFailed}
	switch {
	case rec.Status == operator.StatusRunning:
		d.Known = "An attempt holds the receipt now; its lease has not ended."
		d.Safe = "Nothing: wait for the attempt to record its outcome, or for its lease to end."
	case rec.Unresolved:
		d.Known = "Nobody knows whether the effect happened: an attempt may have reached the downstream, and nothing recorded what it did."
		d.Safe = "Find out at the downstream what happened under this receipt's token, then resolve it: applied (with the result the activity would have returned) or not applied (the next attempt calls again under the same token). Make sure no attempt can still be sending first."
	case rec.Status == operator.StatusLeaseEnded:
		d.Known = "The last attempt's lease ended before any effect was possible."
		d.Safe = "Nothing: the next attempt takes the receipt over and calls the downstream."
	case rec.Status == operator.StatusSucceeded:
		d.Known = "The effect happened and its result is recorded: every later attempt replays it."
		d.Safe = "Nothing to do."
	case rec.Status == operator.StatusFailed:
		d.Known = "The intent failed for good, and every later attempt replays that failure."
		d.Safe = "Once the failure's cause is fixed, re-arm it: the next attempt runs again under the same token."
	default:
		d.Known = "The outcome is recorded."
		d.Safe = "Nothing to do."
	}
	return d, nil
}

// reason is the form's required reason.
func reason(r *http.Request) (string, error) {
	why := r.PostFormValue("reason")
	if why == "" {
		return "", statusf(http.StatusBadRequest, "the reason is empty: say why (a ticket, what the downstream showed)")
	}
	return why, nil
}

// refusal gives the status of an action's error: a refusal of the library is a conflict.
func refusal(err error) error {
	switch {
	case errors.Is(err, operator.ErrNoReceipt), errors.Is(err, outbox.ErrNoMessage):
		return &errStatus{http.StatusNotFound, err}
	case errors.Is(err, operator.ErrNotUnresolved), errors.Is(err, operator.ErrNotFailed), errors.Is(err, outbox.ErrNotDead):
		return &errStatus{http.StatusConflict, err}
	case errors.Is(err, outbox.ErrInvalidAction):
		return &errStatus{http.StatusBadRequest, err}
	}
	return err
}

func (h *Handler) resolve(r *http.Request, by string) (string, error) {
	tok := keys.Token(r.PathValue("token"))
	why, err := reason(r)
	if err != nil {
		return "", err
	}
	res := operator.Resolution{By: by, Reason: why}
	switch r.PostFormValue("outcome") {
	case "applied":
		res.Applied = true
		result := r.PostFormValue("result")
		if !json.Valid([]byte(result)) {
			return "", statusf(http.StatusBadRequest, "the result is not JSON: give the JSON of the activity's result")
		}
		res.Result = json.RawMessage(result)
	case "not-applied":
	default:
		return "", statusf(http.StatusBadRequest, "say whether the effect was applied or not")
	}
	if _, err := h.cfg.Operator.Resolve(r.Context(), tok, res); err != nil {
		return "", refusal(err)
	}
	return "receipts/" + url.PathEscape(string(tok)), nil
}

func (h *Handler) rearm(r *http.Request, by string) (string, error) {
	tok := keys.Token(r.PathValue("token"))
	why, err := reason(r)
	if err != nil {
		return "", err
	}
	if _, err := h.cfg.Operator.Rearm(r.Context(), tok, operator.Rearming{By: by, Reason: why}); err != nil {
		return "", refusal(err)
	}
	return "receipts/" + url.PathEscape(string(tok)), nil
}

// outboxData is the outbox page's.
type outboxData struct {
	State, Topic, Key string
	Page              outbox.Page
	NextQuery         string
}

func (h *Handler) outboxList(r *http.Request) (any, error) {
	q := r.URL.Query()
	d := outboxData{State: q.Get("state"), Topic: q.Get("topic"), Key: q.Get("key")}
	f := outbox.ListFilter{State: d.State, Topic: d.Topic, Key: d.Key, Limit: h.cfg.PageSize}
	if a := q.Get("after"); a != "" {
		var err error
		if f.After, err = strconv.ParseInt(a, 10, 64); err != nil {
			return nil, statusf(http.StatusBadRequest, "after is %q, not a cursor: follow the page's next link", a)
		}
	}
	page, err := h.cfg.Outbox.List(r.Context(), f)
	if errors.Is(err, outbox.ErrInvalidFilter) {
		return nil, &errStatus{http.StatusBadRequest, err}
	}
	if err != nil {
		return nil, err
	}
	d.Page = page
	if page.Next != 0 {
		q.Set("after", strconv.FormatInt(page.Next, 10))
		d.NextQuery = q.Encode()
	}
	return d, nil
}

// messageData is a message's page's.
type messageData struct {
	M     outbox.StoredMessage
	Audit []operator.AuditEntry
}

func (h *Handler) message(r *http.Request) (any, error) {
	id := r.URL.Query().Get("id")
	m, err := h.cfg.Outbox.Get(r.Context(), id)
	if err != nil {
		return nil, refusal(err)
	}
	if userOf(r.Context()).Role != RoleOperator {
		// Payload and headers are the producer's, personal data and secrets included: they
		// never leave the server for a reader, whatever the template does.
		m.Payload, m.Headers = nil, nil
	}
	audit, err := h.cfg.Operator.Audit(r.Context(), keys.Token(id))
	if err != nil {
		return nil, err
	}
	return messageData{M: m, Audit: audit}, nil
}

func (h *Handler) requeue(r *http.Request, by string) (string, error) {
	return h.outboxAction(r, by, h.cfg.Outbox.RequeueMessage)
}

func (h *Handler) discard(r *http.Request, by string) (string, error) {
	return h.outboxAction(r, by, h.cfg.Outbox.DiscardMessage)
}

func (h *Handler) outboxAction(r *http.Request, by string, act func(ctx context.Context, id string, a outbox.Action) error) (string, error) {
	id := r.PostFormValue("id")
	why, err := reason(r)
	if err != nil {
		return "", err
	}
	if err := act(r.Context(), id, outbox.Action{By: by, Reason: why}); err != nil {
		return "", refusal(err)
	}
	return "outbox/message?id=" + url.QueryEscape(id), nil
}

func (h *Handler) audit(r *http.Request) (any, error) {
	var before int64
	if b := r.URL.Query().Get("before"); b != "" {
		var err error
		if before, err = strconv.ParseInt(b, 10, 64); err != nil {
			return nil, statusf(http.StatusBadRequest, "before is %q, not an audit record's ID", b)
		}
	}
	entries, err := h.cfg.Operator.AuditLog(r.Context(), h.cfg.PageSize, before)
	if err != nil {
		return nil, err
	}
	d := auditData{Entries: entries}
	if len(entries) == h.cfg.PageSize {
		d.Older = entries[len(entries)-1].ID
	}
	return d, nil
}

// auditData is the audit page's: a page of records, newest first, and the cursor of the older
// ones (0 when this page is the last).
type auditData struct {
	Entries []operator.AuditEntry
	Older   int64
}
