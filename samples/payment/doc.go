// Package payment is tempotent's sample: a PaymentSaga that charges a card at a payment
// provider (through downstream and the receipts), reserves stock in Postgres (activity.RegisterTx: the stock
// update, its receipt and an outbox row in one transaction), books the shipment with a carrier
// (a second provider) and confirms the order; a declined card or a refused address makes the
// saga refund, release and cancel, each exactly once, whatever the retries, timeouts and worker
// crashes on the way. An order can instead be charged at a gateway that does not deduplicate
// (Order.Gateway, LegacyCharge): there the receipt reconciles, asking the gateway what an
// attempt that died did, rather than charging again. A PayoutWorkflow pays many sellers in one
// batch activity (PayOut, activity.ForEach): each seller under a receipt of its own, so a
// retry after a crash pays the sellers left and nobody twice; Seller.Note is left out of the
// fingerprint with a struct tag. Its messages (Edge) go to two inbox consumers: the shipment
// notifier, once per reservation message, and the charge ledger, which keeps each charge's
// status from the provider's webhooks, applying an event only if it is newer (inbox.Inbox.Newer):
// they arrive out of order. The demo package runs it all end to end (make demo).
package payment
