package keys

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
)

// The intent protocol: how workflow code tells an activity which intent it performs.
//
// The workflow-side interceptor decides the whole identity of every activity it schedules —
// operation and ID — and writes it into one header, headerIntent, as a versioned JSON object:
//
//	{"v":1,"op":"charge","id":"wf:order-123/<epoch>/charge#1"}
//	{"v":1,"op":"refund","id":"comp:charge/<token>","comp":{"op":"charge","id":"wf:…"}}
//
// The activity side adds only what Temporal and the tenant propagator tell it — the namespace
// and the tenant — and validates. It never derives an ID of its own for an activity that a
// workflow scheduled: a header it cannot read, of a version it does not know, or with a part that
// is malformed is refused with an *InvalidKeyError before anything is written, and a missing
// header with ErrNoIdentity. So the key is decided in one place, workflow code, and a worker's
// configuration cannot change it.
//
// Version 1 is the only version. A later version adds fields that older activity workers would
// not honour; such workers refuse it rather than key the intent without them. Deploy activity
// workers that read a new version before workflow workers that write it.
const (
	headerIntent  = "tempotent-intent"
	intentVersion = 1
	// headerEpoch is written on the Continue-As-New of a run: it names the new run's generation
	// of workflow-scope keys (see epoch).
	headerEpoch = "tempotent-epoch"
	// headerEpochRefused is written, instead of headerEpoch, on the start of a child workflow
	// whose parent was refused its workflow-scope keys: it says why, and the child's workflow
	// scope is refused too. A separate header, so that a worker that does not know it keys the
	// child by its own first run, as before, rather than by a shared text.
	headerEpochRefused = "tempotent-epoch-refused"
)

// intent is the header's content.
type intent struct {
	Version   int    `json:"v"`
	Operation string `json:"op"`
	ID        string `json:"id"`
	// Compensates names the forward step of a compensation (WithCompensation).
	Compensates *forwardStep `json:"comp,omitempty"`
	// Refused, instead of an ID, says why the workflow could not key this activity (see
	// epochOf). Only an activity that asks for its key fails on it, with ErrNoIdentity: an
	// activity without receipts runs as it would without tempotent.
	Refused string `json:"refused,omitempty"`
}

type forwardStep struct {
	Operation string `json:"op"`
	ID        string `json:"id"`
}

func (in intent) write(header map[string]*commonpb.Payload) error {
	in.Version = intentVersion
	p, err := headerConverter.ToPayload(in)
	if err != nil {
		return err
	}
	header[headerIntent] = p
	return nil
}

// readIntent reads the intent header: ok is false when there is none.
func readIntent(header map[string]*commonpb.Payload) (in intent, ok bool, err error) {
	p := header[headerIntent]
	if p == nil {
		return intent{}, false, nil
	}
	if err := headerConverter.FromPayload(p, &in); err != nil {
		return intent{}, true, &InvalidKeyError{Part: "intent header", Reason: fmt.Sprintf("cannot be read (%v); the workflow worker wrote something this version of tempotent does not understand", err)}
	}
	if in.Version != intentVersion {
		return intent{}, true, &InvalidKeyError{Part: "intent header", Reason: fmt.Sprintf("has version %d, and this activity worker honours version %d only: upgrade it to the workflow worker's tempotent version", in.Version, intentVersion)}
	}
	return in, true, nil
}

func readString(header map[string]*commonpb.Payload, name string) string {
	var s string
	if p := header[name]; p != nil {
		_ = headerConverter.FromPayload(p, &s) // a malformed value reads as absent
	}
	return s
}
