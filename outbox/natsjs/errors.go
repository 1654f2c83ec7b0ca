package natsjs

import (
	"fmt"
	"strconv"
	"time"
)

// SubjectError: a message's subject is not one to publish on, or Config.Subject failed for it.
// Publish returns it wrapped by outbox.Permanent (the message is parked as dead).
type SubjectError struct {
	Topic   string // the message's topic
	Subject string // the subject it mapped to; empty when Config.Subject failed
	Reason  string
	Err     error // Config.Subject's error, if that failed
}

func (e *SubjectError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("natsjs: no subject for topic %q: %s: %v", e.Topic, e.Reason, e.Err)
	}
	return fmt.Sprintf("natsjs: subject %q (of topic %q) is not a NATS subject to publish on: %s; give topics that are dot-separated tokens without whitespace or wildcards, or map them with Config.Subject",
		e.Subject, e.Topic, e.Reason)
}

func (e *SubjectError) Unwrap() error { return e.Err }

// StreamError: the stream does not exist, or does not take the subject (no stream does, or
// Other does). New returns it for a missing stream; Publish returns it wrapped by
// outbox.Permanent.
type StreamError struct {
	Stream  string
	Subject string        // the subject published on; empty from New
	Other   string        // the stream that takes Subject instead, if one does
	Window  time.Duration // the Duplicates window the stream needs
	Err     error         // the publish's error, if any
}

func (e *StreamError) Error() string {
	switch {
	case e.Subject == "":
		return fmt.Sprintf("natsjs: stream %s does not exist; create it with the subjects the messages go to and a Duplicates window of at least %s (nats stream add %s --subjects ... --dupe-window %s)",
			e.Stream, e.Window, e.Stream, e.Window)
	case e.Other != "":
		return fmt.Sprintf("natsjs: subject %s is taken by stream %s, not by %s, which the publisher publishes to; publish it to %s with a publisher of its own, or move the subject to %s's Subjects",
			e.Subject, e.Other, e.Stream, e.Other, e.Stream)
	default:
		return fmt.Sprintf("natsjs: no stream takes subject %s: create stream %s, or add %s to its Subjects, with a Duplicates window of at least %s",
			e.Subject, e.Stream, e.Subject, e.Window)
	}
}

func (e *StreamError) Unwrap() error { return e.Err }

// WindowError: the stream's Duplicates window is shorter than Config.MinDuplicateWindow, so a
// message published again after a dispatcher's crash or a lost ack could be stored twice. New
// returns it.
type WindowError struct {
	Stream string
	Window time.Duration // the stream's
	Min    time.Duration // Config.MinDuplicateWindow
}

func (e *WindowError) Error() string {
	return fmt.Sprintf("natsjs: stream %s keeps message IDs for %s (its Duplicates window), less than the %s a dispatcher may take to publish a message again; set the stream's Duplicates to at least %s (nats stream edit %s --dupe-window %s), or shorten the dispatcher's Lease and BackoffMax and lower Config.MinDuplicateWindow to RetryHorizon of its config",
		e.Stream, e.Window, e.Min, e.Min, e.Stream, e.Min)
}

// HeaderError: a message's ID or one of its headers cannot travel as a NATS header unchanged (a
// line break, surrounding whitespace, a name with a colon or a space). Publish returns it wrapped
// by outbox.Permanent: sent altered, two message IDs could deduplicate as one.
type HeaderError struct {
	ID     string // the message's ID
	Name   string // the header
	Reason string
	Err    error
}

func (e *HeaderError) Error() string {
	s := fmt.Sprintf("natsjs: message %s: header %s: %s; give IDs and headers without line breaks or surrounding whitespace",
		strconv.Quote(e.ID), strconv.Quote(e.Name), e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *HeaderError) Unwrap() error { return e.Err }
