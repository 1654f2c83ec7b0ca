package saga

// Saga states, as State.Status reports them.
const (
	StateRunning            = "running"
	StateCompleted          = "completed"
	StateCompensating       = "compensating"
	StateCompensated        = "compensated"
	StateCompensationFailed = "compensation failed"
)

// Outcome is what the workflow knows of a forward step.
type Outcome string

// Outcomes of a forward step.
const (
	OutcomeScheduled Outcome = "scheduled" // the forward activity has not settled
	OutcomeCompleted Outcome = "completed" // its result came back: the effect happened
	OutcomeFailed    Outcome = "failed"    // a non-retryable error: the effect did not happen
	OutcomeUnknown   Outcome = "unknown"   // timed out, cancelled or out of retries: it may have happened
)

// CompensationStatus is where a step's compensation stands.
type CompensationStatus string

// Statuses of a step's compensation.
const (
	CompensationRegistered CompensationStatus = "registered" // will run if the saga compensates
	CompensationRunning    CompensationStatus = "running"    // scheduled, retried until it settles
	CompensationCompleted  CompensationStatus = "completed"  // the undo is done (or there was nothing to undo)
	CompensationFailed     CompensationStatus = "failed"     // failed for good: CompensationError names it
	CompensationSkipped    CompensationStatus = "skipped"    // not run: an earlier one failed (histories of earlier versions only)
)

// State is the saga's record, as the query handler returns it.
type State struct {
	Status string      `json:"status"`
	Steps  []StepState `json:"steps"`
}

// StepState is one forward step and its compensation.
type StepState struct {
	Index   int     `json:"index"`
	Name    string  `json:"name"`
	Token   string  `json:"token"` // the forward key's downstream token
	Outcome Outcome `json:"outcome"`
	Error   string  `json:"error,omitempty"`

	Compensation      string             `json:"compensation"`
	CompensationToken string             `json:"compensation_token"`
	CompensationState CompensationStatus `json:"compensation_state"`
	CompensationError string             `json:"compensation_error,omitempty"`
}

// State returns a snapshot of the saga's record.
func (s *Saga) State() State {
	out := State{Status: s.state, Steps: make([]StepState, 0, len(s.steps))}
	for _, st := range s.steps {
		out.Steps = append(out.Steps, StepState{
			Index:             st.index,
			Name:              st.name,
			Token:             st.key.Token().String(),
			Outcome:           st.outcome,
			Error:             st.err,
			Compensation:      st.compKey.Operation,
			CompensationToken: st.compKey.Token().String(),
			CompensationState: st.compStatus,
			CompensationError: st.compErr,
		})
	}
	return out
}
