package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tempotent/tempotent/outbox"
)

// Headers that Publisher adds to every record. A consumer deduplicates on HeaderMessageID.
const (
	HeaderMessageID = "tempotent-message-id" // the outbox message's ID
	HeaderTopic     = "tempotent-topic"      // the outbox topic, before Config.Topics mapped it
	HeaderAttempt   = "tempotent-attempt"    // Delivery.Attempt, in decimal: 1 on the first delivery
)

// Config configures a Publisher. The zero Config (or nil) is valid.
type Config struct {
	// Topics maps an outbox topic to the Kafka topic its messages are produced to. An outbox
	// topic that is not in the map goes to the Kafka topic of the same name. New
	// refuses a map whose values are not legal Kafka topic names (*TopicError); an unmapped
	// outbox topic that is not a legal Kafka name is a permanent failure of its messages.
	Topics map[string]string
}

// Publisher produces outbox messages to Kafka, one record per delivery, through a franz-go
// client: the record's key is the message's ordering key, its value the payload, and its
// headers the message's headers followed by HeaderMessageID, HeaderTopic and HeaderAttempt.
//
// Publish produces synchronously and returns nil only once the broker has acknowledged the
// record from all in-sync replicas (New refuses a client that asks for less). Records
// with one ordering key go to one partition (franz-go's default partitioner hashes the key as
// Kafka's Java client does), and they arrive in put order: the dispatcher claims a key's next
// message only once the one before it is delivered.
//
// A message is produced at least once, not exactly once: a dispatcher that dies after the broker
// acknowledged a record, before it marked the message delivered, leaves the message to the next
// claim, which produces a second record with the same HeaderMessageID (see the package
// documentation). Consumers deduplicate on that header.
type Publisher struct {
	client *kgo.Client
	topics map[string]string
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher that produces through client, which it does not close.
//
// It refuses, with a *SettingError that names the option to change, a client whose settings
// would let a retry duplicate or reorder records, or make Publish return before the broker
// holds the record: acks other than all in-sync replicas (kgo.RequiredAcks other than
// kgo.AllISRAcks, checked first, since franz-go allows it only with the next), idempotent writes
// disabled (kgo.DisableIdempotentWrite), cancellation of in-flight
// records allowed (kgo.AllowIdempotentProduceCancellation), a transactional ID
// (kgo.TransactionalID: records would need a transaction around them), or manual flushing
// (kgo.ManualFlushing: a synchronous produce would wait for a flush nobody calls). It refuses
// a Config.Topics value that is not a legal Kafka topic name with a *TopicError.
func New(client *kgo.Client, cfg *Config) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("kafka.New: client is nil; pass a *kgo.Client made by kgo.NewClient")
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	topics := maps.Clone(c.Topics)
	for _, from := range slices.Sorted(maps.Keys(topics)) {
		if reason := invalidTopic(topics[from]); reason != "" {
			return nil, &TopicError{OutboxTopic: from, KafkaTopic: topics[from], Reason: reason}
		}
	}
	return &Publisher{client: client, topics: topics}, nil
}

// SettingError is New's refusal of a client whose producer settings break the
// publisher's contract. Option names the kgo option, Found what the client has, and Fix what to
// set instead.
type SettingError struct {
	Option string
	Found  string
	Fix    string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("kafka.New: the client's %s is %s; %s", e.Option, e.Found, e.Fix)
}

// checkClient refuses a client whose settings break the publisher's contract.
func checkClient(cl *kgo.Client) error {
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); !ok || acks != kgo.AllISRAcks() {
		return &SettingError{Option: "kgo.RequiredAcks", Found: acksName(acks),
			Fix: "set kgo.RequiredAcks(kgo.AllISRAcks()) (the default): a message is marked delivered when Publish returns, so the record must be on every in-sync replica by then"}
	}
	if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return &SettingError{Option: "kgo.DisableIdempotentWrite", Found: "set",
			Fix: "remove it: without the idempotent producer, a retry inside the client can write a record twice or reorder a key's records"}
	}
	if v, _ := cl.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); v {
		return &SettingError{Option: "kgo.AllowIdempotentProduceCancellation", Found: "set",
			Fix: "remove it: cancelling a record in flight breaks the idempotent producer's deduplication of retries"}
	}
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		return &SettingError{Option: "kgo.TransactionalID", Found: strconv.Quote(id),
			Fix: "give the publisher a client without a transactional ID: it produces each record on its own, outside a Kafka transaction"}
	}
	if v, _ := cl.OptValue(kgo.ManualFlushing).(bool); v {
		return &SettingError{Option: "kgo.ManualFlushing", Found: "set",
			Fix: "remove it: Publish waits for the broker's acknowledgement, which a manually flushed client sends only on Flush"}
	}
	return nil
}

func acksName(a kgo.Acks) string {
	switch a {
	case kgo.NoAck():
		return "kgo.NoAck()"
	case kgo.LeaderAck():
		return "kgo.LeaderAck()"
	}
	return fmt.Sprintf("%+v", a)
}

// TopicError: an outbox topic maps to something that is not a legal Kafka topic name. From
// New for a Config.Topics value; from Publish, wrapped by outbox.Permanent, for an
// unmapped outbox topic that is not a legal name itself.
type TopicError struct {
	OutboxTopic string
	KafkaTopic  string
	Reason      string
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("kafka: outbox topic %q maps to Kafka topic %q, which %s; map it to a legal name in Config.Topics (1 to 249 of a-z A-Z 0-9 . _ -, not \".\" or \"..\")",
		e.OutboxTopic, e.KafkaTopic, e.Reason)
}

// invalidTopic says why name is not a legal Kafka topic name, or returns "".
func invalidTopic(name string) string {
	switch {
	case name == "":
		return "is empty"
	case name == "." || name == "..":
		return "is reserved"
	case len(name) > 249:
		return "is longer than 249 characters"
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Sprintf("contains %q", r)
		}
	}
	return ""
}

// Topic returns the Kafka topic that messages of the outbox topic are produced to, or a
// *TopicError if that is not a legal Kafka topic name.
func (p *Publisher) Topic(outboxTopic string) (string, error) {
	name, ok := p.topics[outboxTopic]
	if !ok {
		name = outboxTopic
	}
	if reason := invalidTopic(name); reason != "" {
		return "", &TopicError{OutboxTopic: outboxTopic, KafkaTopic: name, Reason: reason}
	}
	return name, nil
}

// Record returns the record that Publish produces for d.
func (p *Publisher) Record(d outbox.Delivery) (*kgo.Record, error) {
	topic, err := p.Topic(d.Topic)
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: topic, Value: d.Payload}
	if d.OrderingKey != "" {
		r.Key = []byte(d.OrderingKey)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(d.Headers)+3)
	for _, name := range slices.Sorted(maps.Keys(d.Headers)) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(d.Headers[name])})
	}
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(d.ID)},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(d.Topic)},
		kgo.RecordHeader{Key: HeaderAttempt, Value: []byte(strconv.Itoa(d.Attempt))},
	)
	return r, nil
}

// Publish implements outbox.Publisher: it produces d's record and waits for the broker's
// acknowledgement. Errors that another attempt cannot cure are wrapped by outbox.Permanent, so
// that the dispatcher parks the message as dead for an operator: an outbox topic without a
// legal Kafka name, a Kafka topic that does not exist (after the client's
// kgo.UnknownTopicRetries), a topic or cluster the client is not authorised to write to, and a
// record larger than the broker or client accepts. Any other error (a broker unreachable, a
// timeout, ctx ending) is retried by the dispatcher.
func (p *Publisher) Publish(ctx context.Context, d outbox.Delivery) error {
	r, err := p.Record(d)
	if err != nil {
		return outbox.Permanent(err)
	}
	if err := p.client.ProduceSync(ctx, r).FirstErr(); err != nil {
		if fix := permanent(err); fix != "" {
			return outbox.Permanent(fmt.Errorf("kafka: produce message %s to topic %s: %w; %s", d.ID, r.Topic, err, fix))
		}
		return fmt.Errorf("kafka: produce message %s to topic %s: %w", d.ID, r.Topic, err)
	}
	return nil
}

// permanent returns what to do about an error that no retry will cure, or "" for one that a
// retry may.
func permanent(err error) string {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return "create the topic, or map the outbox topic to an existing one in Config.Topics, then requeue the message"
	case errors.Is(err, kerr.InvalidTopicException):
		return "map the outbox topic to a legal Kafka topic in Config.Topics, then requeue the message"
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return "grant the client's principal WRITE on the topic (and IDEMPOTENT_WRITE on the cluster before Kafka 3.0), then requeue the message"
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return "raise the topic's max.message.bytes and the client's kgo.ProducerBatchMaxBytes, or put a reference to the data instead of the data, then requeue or discard the message"
	}
	return ""
}

// MessageID returns the outbox message ID that r carries in its HeaderMessageID header, or ""
// if it has none (a record that Publisher did not produce). Consumers deduplicate on it, for
// example with an inbox.Inbox.
func MessageID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == HeaderMessageID {
			return string(h.Value)
		}
	}
	return ""
}
