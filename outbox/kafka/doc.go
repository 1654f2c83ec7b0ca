// Package kafka publishes tempotent's outbox messages to Kafka through franz-go: one record per
// delivery, keyed by the message's ordering key, its ID in a header for consumers to
// deduplicate on. It is a module of its own (github.com/tempotent/tempotent/outbox/kafka), so
// that the toolkit's go.mod does not carry franz-go.
//
//	cl, _ := kgo.NewClient(kgo.SeedBrokers("kafka:9092")) // franz-go's defaults are what it needs
//	pub, err := kafka.New(cl, &kafka.Config{Topics: map[string]string{"order.reserved": "orders"}})
//	d, _ := outbox.NewDispatcher(out, pub, nil)
//	go d.Run(ctx)
//
// # Producer settings
//
// New checks the client and refuses (*SettingError) one that does not have:
//
//   - acks from all in-sync replicas (kgo.RequiredAcks(kgo.AllISRAcks()), the default): Publish
//     returns, and the dispatcher marks the message delivered, only once every in-sync replica
//     holds the record, so a broker that fails afterwards loses nothing that was marked;
//   - the idempotent producer (on by default; kgo.DisableIdempotentWrite is refused), without
//     kgo.AllowIdempotentProduceCancellation: the client retries a produce request whose answer
//     it lost, and the broker drops the retry's copy instead of writing the record twice or out
//     of order;
//   - no transactional ID and no manual flushing: each record is produced on its own and waited
//     for.
//
// Publish's context (the dispatcher's PublishTimeout) bounds it loosely: franz-go looks at a
// record's context only between produce requests and never abandons a request in flight, which
// would break the idempotent producer's sequence, so a publish can end after its timeout by up to
// the client's kgo.ProduceRequestTimeout and retry backoff. If it ends after the claim's lease,
// the dispatcher's mark is refused and the message is produced again: one more duplicate for
// consumers to absorb. Keep those client timeouts short next to the tenth of the lease that the
// dispatcher keeps for marking, or give the dispatcher a longer Lease. Records of one
// ordering key go to one partition with franz-go's default partitioner (and Kafka's, which
// hashes keys alike); a kgo.RecordPartitioner that ignores keys spreads a key over partitions and
// loses its order. A message without an ordering key has a nil key.
//
// # What is and is not guaranteed
//
// Every message put in a committed transaction is produced at least once, and a key's messages
// reach its partition in the order they were put: the dispatcher claims a key's next message
// only once the one before it is marked delivered, which it is only after the broker's
// acknowledgement.
//
// A message may be produced more than once. Kafka's idempotent producer deduplicates the retries
// of one client session (one producer ID) only. A dispatcher that dies after the broker
// acknowledged a record and before the message was marked delivered leaves it claimed until its
// lease ends; the next claim, by another client, produces it again: a second record, with the
// same HeaderMessageID and a higher HeaderAttempt. So does a publish whose acknowledgement is
// lost (the produce times out after the broker wrote it). Because a key's next message waits
// for its predecessor to be marked, the second copy comes before any later message of the key,
// and the first appearance of each ID keeps the put order.
//
// Consumers therefore deduplicate on HeaderMessageID. tempotent's inbox does that, in the
// consumer's own transaction:
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	for _, r := range fetches.Records() {
//		_, err := in.Process(ctx, inbox.Message{ID: kafka.MessageID(r), Payload: r.Value},
//			func(ctx context.Context, tx pgx.Tx) error { return ship(ctx, tx, r.Value) })
//		// commit r's offset once Process returned nil (ran, or a duplicate already processed)
//	}
//
// Kafka transactions (exactly-once between Kafka topics) do not help here: the outbox's source
// of truth is Postgres, and no Kafka transaction can include the mark of a Postgres row.
//
// # Errors
//
// Errors that another attempt cannot cure are wrapped by outbox.Permanent, so that the
// dispatcher parks the message as dead for an operator to requeue once the cause is fixed: an
// outbox topic without a legal Kafka name (*TopicError), an unknown topic
// (kerr.UnknownTopicOrPartition, once the client's kgo.UnknownTopicRetries are spent), a denied
// write (kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed), a record too large
// (kerr.MessageTooLarge, kerr.RecordListTooLarge). The errors wrap franz-go's, for errors.Is.
// Anything else is retried with the dispatcher's backoff.
package kafka
