package outbox

import (
	"context"
	"errors"
	"time"
)

// Publisher delivers a message to where it goes. The dispatcher calls Publish at least once per
// message and never for one message from two calls at once (see Dispatcher); a publisher makes a
// repeated delivery harmless by passing the message ID on, for the receiver to deduplicate on.
//
// A nil error marks the message delivered. An error wrapped by Permanent parks it as dead at
// once; any other error retries it after a backoff, until DispatcherConfig.MaxAttempts. A panic in
// Publish is recovered and counts as such an error, so that one bad message cannot take down the
// process it runs in.
type Publisher interface {
	Publish(ctx context.Context, d Delivery) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, d Delivery) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, d Delivery) error { return f(ctx, d) }

// Delivery is a message as the dispatcher hands it to a publisher.
type Delivery struct {
	Message
	// Attempt counts the claims of this message, this one included: 1 on the first delivery.
	Attempt int
	// CreatedAt is when the message was put (the database's clock).
	CreatedAt time.Time
}

// Permanent wraps err so that the dispatcher parks the message as dead instead of retrying it:
// for a message the receiver will never accept (malformed, unknown topic, a workflow that has
// closed). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
