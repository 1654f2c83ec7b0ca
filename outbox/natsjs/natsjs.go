package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tempotent/tempotent/outbox"
)

// HeaderOrderingKey carries a message's ordering key, when it has one. The topic and the attempt
// travel in outbox.HeaderTopic and outbox.HeaderAttempt, as with outbox.HTTPPublisher.
const HeaderOrderingKey = "Tempotent-Ordering-Key"

// MinDuplicateWindowDefault is the shortest Duplicates window New accepts by default: the
// dispatcher's default Lease, BackoffMax and Poll added up, RetryHorizon(nil) (a literal, so that
// go doc shows it). It is longer than JetStream's own default window (two minutes): a stream
// created with the defaults is refused.
const MinDuplicateWindowDefault = 5*time.Minute + 31*time.Second

// RetryHorizon is how long after a message reached the stream a dispatcher configured by cfg
// (nil: the defaults) may publish it again, in the common cases: a dispatcher that dies or loses
// its claim after the publish and before the mark is followed by another once the Lease ends; a
// publish stored by the stream but reported failed (its ack lost) is retried after at most
// BackoffMax; either is found at the next Poll. Give it as Config.MinDuplicateWindow.
//
// It does not cover a retry after a retry that failed again (each adds up to BackoffMax), nor a
// dead message requeued by an operator: those may come later than any window, and are then
// delivered twice.
func RetryHorizon(cfg *outbox.DispatcherConfig) time.Duration {
	var c outbox.DispatcherConfig
	if cfg != nil {
		c = *cfg
	}
	return cmpOr(c.Lease, outbox.LeaseDefault) + cmpOr(c.BackoffMax, outbox.BackoffMaxDefault) + cmpOr(c.Poll, outbox.PollDefault)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// JetStream is the part of jetstream.JetStream that a Publisher uses; a jetstream.JetStream
// (jetstream.New(nc)) is one.
type JetStream interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
	StreamNameBySubject(ctx context.Context, subject string) (string, error)
}

// Config configures a Publisher. The zero Config (or nil) is valid.
type Config struct {
	// Subject gives the subject a message is published on; it must be one the stream takes.
	// Default: the message's topic. A subject that is not a valid NATS subject to publish on
	// (empty, empty tokens, whitespace, the wildcards * and >) is refused with a *SubjectError,
	// as is an error from Subject; both are permanent (the message is parked as dead).
	Subject func(d outbox.Delivery) (string, error)
	// MinDuplicateWindow is the shortest Duplicates window of the stream that New accepts.
	// Default MinDuplicateWindowDefault; give RetryHorizon of your dispatcher's config.
	MinDuplicateWindow time.Duration
	// SkipStreamCheck: New does not read the stream's info, for credentials allowed to publish
	// but not to read it. That the stream exists and that its Duplicates window exceeds the
	// dispatcher's retry horizon are then yours to ensure.
	SkipStreamCheck bool
}

// Publisher publishes outbox messages to a JetStream stream and waits for the stream's ack. It
// implements outbox.Publisher.
//
// The message ID goes out as the Nats-Msg-Id header, so that the stream drops a second publish of
// it within its Duplicates window and acks it as a duplicate, which the publisher reports as
// delivered: a dispatcher that dies between the publish and the mark, or whose ack was lost,
// publishes again and the stream still holds the message once. Beyond the window the stream
// holds it twice; see the package documentation.
//
// Every publish expects the Publisher's stream (Nats-Expected-Stream), so that a subject that
// another stream takes is refused rather than stored where no window was checked. Outcomes: an
// ack, new or duplicate, is delivered; a stream that does not exist or does not take the subject
// (*StreamError), a bad subject (*SubjectError), a header NATS cannot carry unchanged
// (*HeaderError) and a message above the stream's or the server's size limit are permanent,
// wrapped by outbox.Permanent; anything else (a timeout, a lost connection, a stream leader
// being elected) is returned as is and retried by the dispatcher.
//
// The message's headers go out as NATS headers; Nats-Msg-Id, Nats-Expected-Stream and the
// Tempotent- headers above are set by the publisher over any of the same name.
//
// A Publisher is safe for concurrent use: the dispatcher publishes Concurrency messages at once.
type Publisher struct {
	js     JetStream
	stream string
	cfg    Config
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher to stream. Unless cfg.SkipStreamCheck is set, it reads the stream's
// info (Check) and refuses a stream that does not exist (*StreamError) or whose Duplicates window
// is shorter than cfg.MinDuplicateWindow (*WindowError).
func New(ctx context.Context, js JetStream, stream string, cfg *Config) (*Publisher, error) {
	if js == nil {
		return nil, errors.New("natsjs.New: js is nil; pass jetstream.New(nc)")
	}
	if stream == "" {
		return nil, errors.New("natsjs.New: the stream name is empty; name the stream the messages go to")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MinDuplicateWindow < 0 {
		return nil, fmt.Errorf("natsjs.New: MinDuplicateWindow is %s; give a positive duration, or 0 for the default", c.MinDuplicateWindow)
	}
	c.MinDuplicateWindow = cmpOr(c.MinDuplicateWindow, MinDuplicateWindowDefault)
	p := &Publisher{js: js, stream: stream, cfg: c}
	if !c.SkipStreamCheck {
		if err := p.Check(ctx); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Stream is the name of the stream the publisher publishes to.
func (p *Publisher) Stream() string { return p.stream }

// Check reads the stream's info and reports a stream that does not exist (*StreamError) or whose
// Duplicates window is shorter than Config.MinDuplicateWindow (*WindowError); an error reading
// the info is returned wrapped. New calls it; call it again from a health check to notice a
// stream edited since.
func (p *Publisher) Check(ctx context.Context) error {
	s, err := p.js.Stream(ctx, p.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return &StreamError{Stream: p.stream, Window: p.cfg.MinDuplicateWindow}
	}
	if err != nil {
		return fmt.Errorf("natsjs: read the info of stream %s (to check its Duplicates window): %w; grant the info request, or set Config.SkipStreamCheck", p.stream, err)
	}
	if w := s.CachedInfo().Config.Duplicates; w < p.cfg.MinDuplicateWindow {
		return &WindowError{Stream: p.stream, Window: w, Min: p.cfg.MinDuplicateWindow}
	}
	return nil
}

// Publish implements outbox.Publisher: it publishes d with its ID as Nats-Msg-Id and waits for
// the stream's ack. See Publisher for what each outcome means.
func (p *Publisher) Publish(ctx context.Context, d outbox.Delivery) error {
	subject, err := p.subject(d)
	if err != nil {
		return outbox.Permanent(err)
	}
	msg := &nats.Msg{Subject: subject, Data: d.Payload, Header: nats.Header{}}
	for name, value := range d.Headers {
		msg.Header.Set(name, value)
	}
	msg.Header.Set(outbox.HeaderTopic, d.Topic)
	msg.Header.Set(outbox.HeaderAttempt, strconv.Itoa(d.Attempt))
	if d.OrderingKey != "" {
		msg.Header.Set(HeaderOrderingKey, d.OrderingKey)
	}
	msg.Header.Set(jetstream.MsgIDHeader, d.ID)
	if err := checkHeaders(d.ID, msg.Header); err != nil {
		return outbox.Permanent(err)
	}
	// WithMsgID sets the same header; it is set above too so that checkHeaders sees it.
	_, err = p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(d.ID), jetstream.WithExpectStream(p.stream))
	if err == nil {
		return nil // stored, or a duplicate of a message the stream holds: delivered either way
	}
	return p.classify(ctx, subject, d, err)
}

// subject maps d to its subject and validates it.
func (p *Publisher) subject(d outbox.Delivery) (string, error) {
	subject := d.Topic
	if p.cfg.Subject != nil {
		var err error
		if subject, err = p.cfg.Subject(d); err != nil {
			return "", &SubjectError{Topic: d.Topic, Reason: "Config.Subject failed", Err: err}
		}
	}
	if reason := invalidSubject(subject); reason != "" {
		return "", &SubjectError{Topic: d.Topic, Subject: subject, Reason: reason}
	}
	return subject, nil
}

// invalidSubject says why s is not a subject to publish on, or returns "".
func invalidSubject(s string) string {
	if s == "" {
		return "it is empty"
	}
	if strings.ContainsAny(s, " \t\r\n\f\v") {
		return "it contains whitespace"
	}
	for token := range strings.SplitSeq(s, ".") {
		switch token {
		case "":
			return "it has an empty token (a leading, trailing or doubled dot)"
		case "*", ">":
			return "it has the wildcard token " + strconv.Quote(token) + ", which subscriptions use, not publishes"
		}
	}
	return ""
}

// checkHeaders refuses a header NATS would send other than it is: a value with a line break or
// surrounding whitespace (nats.go trims it and turns line breaks into spaces: two IDs that differ
// only so would deduplicate as one), or a name that is not a header name.
func checkHeaders(id string, h nats.Header) error {
	for name, values := range h {
		if name == "" || strings.ContainsAny(name, ": \t\r\n") {
			return &HeaderError{ID: id, Name: name, Reason: "it is not a valid header name"}
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n") || textproto.TrimString(v) != v {
				return &HeaderError{ID: id, Name: name, Reason: "its value " + strconv.Quote(v) + " has a line break or surrounding whitespace, which NATS headers do not carry"}
			}
		}
	}
	return nil
}

// classify turns a failed publish into a permanent or a retryable error.
func (p *Publisher) classify(ctx context.Context, subject string, d outbox.Delivery, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		// Nothing answered on the subject: no stream takes it, or the stream's leader is being
		// elected. Only the first is permanent, so ask the server which; a stream that takes it
		// now, or no answer, is retried.
		if _, lookupErr := p.js.StreamNameBySubject(ctx, subject); errors.Is(lookupErr, jetstream.ErrStreamNotFound) {
			return outbox.Permanent(&StreamError{Stream: p.stream, Subject: subject, Window: p.cfg.MinDuplicateWindow, Err: err})
		}
	case isAPIError(err, errCodeStreamNotMatch):
		other, _ := p.js.StreamNameBySubject(ctx, subject)
		return outbox.Permanent(&StreamError{Stream: p.stream, Subject: subject, Other: other, Window: p.cfg.MinDuplicateWindow, Err: err})
	case isAPIError(err, jetstream.JSErrCodeStreamMessageExceedsMaximum), errors.Is(err, nats.ErrMaxPayload):
		return outbox.Permanent(fmt.Errorf("natsjs: publish %s to %s: %d bytes of payload: %w; raise the stream's max_msg_size or the server's max_payload, or put a reference to the data instead",
			d.ID, subject, len(d.Payload), err))
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return outbox.Permanent(&HeaderError{ID: d.ID, Reason: "NATS refused the headers", Err: err})
	}
	return fmt.Errorf("natsjs: publish %s to %s (stream %s): %w", d.ID, subject, p.stream, err)
}

// errCodeStreamNotMatch is the server's JSStreamNotMatchErr: the subject's stream is not the one
// the publish expected. nats.go has no constant for it.
const errCodeStreamNotMatch jetstream.ErrorCode = 10060

func isAPIError(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}
