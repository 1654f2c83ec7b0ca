package keys_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/keys"
)

// The key-API property test: random workflow programs that name their activities' intents with
// every context function of this package, run in Temporal's test environment against a reference
// model of the key each activity must get. The model below is written from the documented rules
// (doc.go, the comments of workflow.go, DESIGN.md's Keys), not from decide:
//
//   - an activity's operation is its innermost WithStep, else its activity type;
//   - WithID wins over everything: "explicit:<id>", the same key wherever and however often it is
//     scheduled (no occurrence);
//   - else WithRunScope: "run:<workflow ID>/<run ID>/<step>#<n>", n counted per step in the run;
//   - else, in an update handler: "upd:<workflow ID>/<update ID>/<step>#<n>", n counted per step
//     in the update;
//   - else the workflow scope: "wf:<workflow ID>/<epoch>/<step>#<n>", n counted per step in the
//     run; the epoch is the run ID in the test environment (no FirstRunID);
//   - every part percent-escaped ('%', '/', '#'); an ID longer than MaxIDLen is "wf:sha256:" and
//     the hex SHA-256 of it;
//   - StepKey(ctx, s) decides, when called, the key WithStep(ctx, s) would give, and its context
//     gives it to exactly one activity: the first scheduled with it as it is. A WithStep, WithID or
//     WithRunScope on that context replaces it (the activity is keyed as without StepKey); a
//     second activity on it as it is, and a child workflow started on it before its key was used,
//     are refused (ErrPinnedContext);
//   - WithCompensation(ctx, k, name) keys one activity "comp:<k's operation>/<k's token>" under
//     operation name; a second one on its context is refused;
//   - a child workflow's activities are keyed in its own workflow scope, whose epoch is
//     "child:<step>/<ID>": the step and ID an activity named as the child would get in the
//     parent (WithStep, else the child's workflow type), counted apart from the activities.
//
// The property: each activity gets exactly the model's key (or is refused where the model
// refuses it), and two activities — of one run or of two workflows running the same program —
// share a key exactly when the model says they are one intent.
//
// The test environment neither retries, continues nor resets workflows: TestKeyModelOnTheDevServer
// (model_server_test.go) runs the programs again in a retried, a continued and a reset run on
// the dev server, where every workflow task replays the workflow from its history (TestMain turns
// the workers' cache off), so the keys must also come out the same from a replay.

// Op is one statement of a generated program.
type Op struct {
	Kind string // "act", "stepkey", "child", "loop"
	Mods []Mod  // context functions applied, in order, to the context the statement uses
	// act: the activity's type, and whether it is local.
	Type  string
	Local bool
	// stepkey: the step, and what is done with the context StepKey returned.
	Step string
	Uses []Use
	// child: the child workflow's ID, after the parent's and '/' (it runs one activity, step
	// "charge", and returns its key).
	ChildID string
	// loop: the body, N times.
	N    int
	Body []Op
}

// Mod is a context function: "step" (WithStep), "id" (WithID) or "run" (WithRunScope).
type Mod struct {
	Kind, Arg string
}

// Use is one use of a context that StepKey returned.
type Use struct {
	// "plain" schedules with it as it is; "mod" with Mod applied to it first; "child" starts a
	// child workflow with it, under ChildID; "comp" calls WithCompensation(it, key, Arg) and
	// schedules Times activities with the compensation's context.
	Kind    string
	ChildID string
	Mod     Mod
	Arg     string
	Type    string
	Local   bool
	Times   int
}

// Program is a generated workflow: Main runs first, then each update handler's program, in order.
type Program struct {
	Main    []Op
	Updates []Update
}

// Update is an update delivered to the program's workflow: its ID and the handler's program.
type Update struct {
	ID   string
	Body []Op
}

var (
	modelSteps = []string{"charge", "ship", "charge/eu", "refund#2", "50%"}
	modelIDs   = []string{"order-1", "order-2", "wf:order-1/x/charge#1"}
	modelTypes = []string{"A", "B"}
	modelComps = []string{"refund", "release"}
	modelChild = []string{"ship-1", "ship/2"}
)

func genProgram(rng *rand.Rand) Program {
	var p Program
	p.Main = genOps(rng, 2+rng.IntN(6), 2)
	for i := range rng.IntN(3) {
		p.Updates = append(p.Updates, Update{ID: []string{"u-1", "u/2", "u-3"}[i], Body: genOps(rng, 1+rng.IntN(3), 1)})
	}
	return p
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func genMod(rng *rand.Rand) Mod {
	switch rng.IntN(5) {
	case 0, 1, 2:
		return Mod{Kind: "step", Arg: pick(rng, modelSteps)}
	case 3:
		return Mod{Kind: "id", Arg: pick(rng, modelIDs)}
	}
	return Mod{Kind: "run"}
}

func genMods(rng *rand.Rand) []Mod {
	var mods []Mod
	for range []int{0, 0, 0, 1, 1, 2}[rng.IntN(6)] {
		mods = append(mods, genMod(rng))
	}
	return mods
}

func genOps(rng *rand.Rand, n, depth int) []Op {
	var ops []Op
	for range n {
		switch k := rng.IntN(10); {
		case k < 5:
			ops = append(ops, Op{Kind: "act", Mods: genMods(rng), Type: pick(rng, modelTypes), Local: rng.IntN(4) == 0})
		case k == 8:
			ops = append(ops, Op{Kind: "child", Mods: genMods(rng), ChildID: pick(rng, modelChild)})
		case k < 8 || depth == 0:
			op := Op{Kind: "stepkey", Mods: genMods(rng), Step: pick(rng, modelSteps)}
			for range rng.IntN(4) {
				u := Use{Type: pick(rng, modelTypes), Local: rng.IntN(4) == 0}
				switch rng.IntN(6) {
				case 0, 1:
					u.Kind = "plain"
				case 2, 3:
					u.Kind, u.Mod = "mod", genMod(rng)
				case 4:
					u.Kind, u.ChildID = "child", pick(rng, modelChild)
				default:
					u.Kind, u.Arg, u.Times = "comp", pick(rng, modelComps), 1+rng.IntN(2)
				}
				op.Uses = append(op.Uses, u)
			}
			ops = append(ops, op)
		default:
			ops = append(ops, Op{Kind: "loop", N: 1 + rng.IntN(3), Body: genOps(rng, 1+rng.IntN(3), depth-1)})
		}
	}
	return ops
}

func (p Program) String() string {
	var b strings.Builder
	b.WriteString("workflow:\n")
	writeOps(&b, p.Main, "\t")
	for _, u := range p.Updates {
		fmt.Fprintf(&b, "update %q:\n", u.ID)
		writeOps(&b, u.Body, "\t")
	}
	return b.String()
}

func modString(base string, mods []Mod) string {
	for _, m := range mods {
		switch m.Kind {
		case "step":
			base = fmt.Sprintf("keys.WithStep(%s, %q)", base, m.Arg)
		case "id":
			base = fmt.Sprintf("keys.WithID(%s, %q)", base, m.Arg)
		default:
			base = fmt.Sprintf("keys.WithRunScope(%s)", base)
		}
	}
	return base
}

func execString(ctx, typ string, local bool) string {
	if local {
		return fmt.Sprintf("workflow.ExecuteLocalActivity(%s, %q)", ctx, typ)
	}
	return fmt.Sprintf("workflow.ExecuteActivity(%s, %q)", ctx, typ)
}

func childString(ctx, id string) string {
	return fmt.Sprintf("workflow.ExecuteChildWorkflow(workflow.WithChildOptions(%s, {WorkflowID: <workflow ID>+%q}), \"keyed-child\")", ctx, "/"+id)
}

func writeOps(b *strings.Builder, ops []Op, indent string) {
	for _, op := range ops {
		switch op.Kind {
		case "act":
			fmt.Fprintf(b, "%s%s\n", indent, execString(modString("ctx", op.Mods), op.Type, op.Local))
		case "stepkey":
			fmt.Fprintf(b, "%spctx, k, _ := keys.StepKey(%s, %q)\n", indent, modString("ctx", op.Mods), op.Step)
			for _, u := range op.Uses {
				switch u.Kind {
				case "plain":
					fmt.Fprintf(b, "%s%s\n", indent, execString("pctx", u.Type, u.Local))
				case "mod":
					fmt.Fprintf(b, "%s%s\n", indent, execString(modString("pctx", []Mod{u.Mod}), u.Type, u.Local))
				case "child":
					fmt.Fprintf(b, "%s%s\n", indent, childString("pctx", u.ChildID))
				case "comp":
					fmt.Fprintf(b, "%scctx, _, _ := keys.WithCompensation(pctx, k, %q)\n", indent, u.Arg)
					for range u.Times {
						fmt.Fprintf(b, "%s%s\n", indent, execString("cctx", u.Type, u.Local))
					}
				}
			}
		case "child":
			fmt.Fprintf(b, "%s%s\n", indent, childString(modString("ctx", op.Mods), op.ChildID))
		case "loop":
			fmt.Fprintf(b, "%sfor range %d {\n", indent, op.N)
			writeOps(b, op.Body, indent+"\t")
			fmt.Fprintf(b, "%s}\n", indent)
		}
	}
}

// modelWorkflow runs a Program and returns, for each activity and child workflow in the order
// they were scheduled, the key it ran under ("<operation> <id>", for a child the key of its
// activity) or "refused: <error>".
func modelWorkflow(ctx workflow.Context, p Program) ([]string, error) {
	ctx = withOptions(ctx)
	var (
		out      []string
		mainDone bool
		turn     int
	)
	if err := workflow.SetUpdateHandler(ctx, "run", func(uctx workflow.Context, i int) error {
		if err := workflow.Await(uctx, func() bool { return mainDone && turn == i }); err != nil {
			return err
		}
		defer func() { turn++ }()
		return runOps(withOptions(uctx), p.Updates[i].Body, &out)
	}); err != nil {
		return nil, err
	}
	if err := runOps(ctx, p.Main, &out); err != nil {
		return nil, err
	}
	mainDone = true
	err := workflow.Await(ctx, func() bool { return turn == len(p.Updates) })
	return out, err
}

func withOptions(ctx workflow.Context) workflow.Context {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
}

func applyMods(ctx workflow.Context, mods []Mod) workflow.Context {
	for _, m := range mods {
		switch m.Kind {
		case "step":
			ctx = keys.WithStep(ctx, m.Arg)
		case "id":
			ctx = keys.WithID(ctx, m.Arg)
		default:
			ctx = keys.WithRunScope(ctx)
		}
	}
	return ctx
}

func schedule(ctx workflow.Context, typ string, local bool, out *[]string) {
	f := workflow.ExecuteActivity
	if local {
		f = workflow.ExecuteLocalActivity
	}
	var k keys.Key
	if err := f(ctx, typ).Get(ctx, &k); err != nil {
		*out = append(*out, "refused: "+err.Error())
		return
	}
	*out = append(*out, k.Operation+" "+k.ID)
}

func startChild(ctx workflow.Context, id string, out *[]string) {
	var s string
	id = workflow.GetInfo(ctx).WorkflowExecution.ID + "/" + id // child IDs are the namespace's: one per parent
	if err := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: id}), "keyed-child").Get(ctx, &s); err != nil {
		*out = append(*out, "refused: "+err.Error())
		return
	}
	*out = append(*out, s)
}

// keyedChild is the child workflow of the programs: one activity, step "charge".
func keyedChild(ctx workflow.Context) (string, error) {
	var out []string
	schedule(keys.WithStep(withOptions(ctx), "charge"), "A", false, &out)
	return out[0], nil
}

func runOps(ctx workflow.Context, ops []Op, out *[]string) error {
	for _, op := range ops {
		switch op.Kind {
		case "act":
			schedule(applyMods(ctx, op.Mods), op.Type, op.Local, out)
		case "stepkey":
			pctx, k, err := keys.StepKey(applyMods(ctx, op.Mods), op.Step)
			if err != nil {
				return err
			}
			for _, u := range op.Uses {
				switch u.Kind {
				case "plain":
					schedule(pctx, u.Type, u.Local, out)
				case "mod":
					schedule(applyMods(pctx, []Mod{u.Mod}), u.Type, u.Local, out)
				case "child":
					startChild(pctx, u.ChildID, out)
				case "comp":
					cctx, _, err := keys.WithCompensation(pctx, k, u.Arg)
					if err != nil {
						return err
					}
					for range u.Times {
						schedule(cctx, u.Type, u.Local, out)
					}
				}
			}
		case "child":
			startChild(applyMods(ctx, op.Mods), op.ChildID, out)
		case "loop":
			for range op.N {
				if err := runOps(ctx, op.Body, out); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// model is the reference: the key each activity of a program must get in one workflow run.
type model struct {
	namespace, tenant, workflowID, runID string
	epoch                                string // the run's epoch: its run ID in the test environment
	counts                               map[string]int
	out                                  []expected
}

// expected is the model's verdict on one scheduled activity: its key, and the intent it is,
// spelled as a tuple of unescaped parts (so that "one intent" is decided apart from the ID's
// spelling); or a refusal.
type expected struct {
	key     keys.Key
	intent  string
	refused bool
}

// naming is what the context functions set on a context.
type naming struct {
	step, id string
	run      bool
}

func (n naming) with(mods []Mod) naming {
	for _, m := range mods {
		switch m.Kind {
		case "step":
			n.step = m.Arg
		case "id":
			n.id = m.Arg
		default:
			n.run = true
		}
	}
	return n
}

var modelEscape = strings.NewReplacer("%", "%25", "/", "%2F", "#", "%23")

// decide is the model's key for an activity of type typ scheduled with naming n, in update (""
// for the workflow's main program), its occurrence counted among counter's.
func (m *model) decide(n naming, typ, update, counter string) expected {
	op := n.step
	if op == "" {
		op = typ
	}
	key := func(id string) keys.Key {
		return keys.Key{Namespace: m.namespace, Tenant: m.tenant, Operation: op, ID: id}
	}
	count := func(scope string) int {
		m.counts[counter+scope+"\x00"+op]++
		return m.counts[counter+scope+"\x00"+op]
	}
	e := modelEscape.Replace
	switch {
	case n.id != "":
		return expected{key: key("explicit:" + n.id), intent: strings.Join([]string{"explicit", op, n.id}, "\x00")}
	case n.run:
		c := count("run")
		return expected{key: key(fmt.Sprintf("run:%s/%s/%s#%d", e(m.workflowID), e(m.runID), e(op), c)),
			intent: strings.Join([]string{"run", m.workflowID, m.runID, op, strconv.Itoa(c)}, "\x00")}
	case update != "":
		c := count("update\x00" + update)
		return expected{key: key(fmt.Sprintf("upd:%s/%s/%s#%d", e(m.workflowID), e(update), e(op), c)),
			intent: strings.Join([]string{"upd", m.workflowID, update, op, strconv.Itoa(c)}, "\x00")}
	}
	c := count("workflow")
	return expected{key: key(fmt.Sprintf("wf:%s/%s/%s#%d", e(m.workflowID), e(m.epoch), e(op), c)),
		intent: strings.Join([]string{"wf", m.workflowID, m.epoch, op, strconv.Itoa(c)}, "\x00")}
}

func (m *model) run(ops []Op, update string) {
	for _, op := range ops {
		switch op.Kind {
		case "act":
			m.out = append(m.out, m.decide(naming{}.with(op.Mods), op.Type, update, ""))
		case "stepkey":
			n := naming{}.with(op.Mods)
			pinned := m.decide(n.with([]Mod{{Kind: "step", Arg: op.Step}}), "", update, "")
			used := false
			for _, u := range op.Uses {
				switch u.Kind {
				case "plain":
					if used {
						m.out = append(m.out, expected{refused: true})
					} else {
						m.out = append(m.out, pinned)
					}
					used = true
				case "mod":
					m.out = append(m.out, m.decide(n.with([]Mod{u.Mod}), u.Type, update, ""))
				case "child":
					if used {
						m.out = append(m.out, m.child(n, u.ChildID, update))
					} else {
						m.out = append(m.out, expected{refused: true})
					}
				case "comp":
					comp := expected{
						key: keys.Key{Namespace: m.namespace, Tenant: m.tenant, Operation: u.Arg,
							ID: "comp:" + modelEscape.Replace(pinned.key.Operation) + "/" + string(pinned.key.Token())},
						intent: strings.Join([]string{"comp", u.Arg, pinned.intent}, "\x00"),
					}
					for i := range u.Times {
						if i == 0 {
							m.out = append(m.out, comp)
						} else {
							m.out = append(m.out, expected{refused: true})
						}
					}
				}
			}
		case "child":
			m.out = append(m.out, m.child(naming{}.with(op.Mods), op.ChildID, update))
		case "loop":
			for range op.N {
				m.run(op.Body, update)
			}
		}
	}
}

// child is the model's key for the activity of a child workflow started under childID with
// naming n: the child's workflow scope, whose epoch is "child:", the child's step and the ID that
// an activity so named would get in the parent (counted apart from the activities).
func (m *model) child(n naming, childID, update string) expected {
	parent := m.decide(n, "keyed-child", update, "child/")
	e := modelEscape.Replace
	epoch := "child:" + e(parent.key.Operation) + "/" + e(parent.key.ID)
	childID = m.workflowID + "/" + childID
	id := fmt.Sprintf("wf:%s/%s/charge#1", e(childID), e(epoch))
	if len(id) > keys.MaxIDLen {
		sum := sha256.Sum256([]byte(id))
		id = "wf:sha256:" + hex.EncodeToString(sum[:])
	}
	return expected{key: keys.Key{Namespace: m.namespace, Tenant: m.tenant, Operation: "charge", ID: id},
		intent: strings.Join([]string{"child workflow", childID, parent.intent}, "\x00")}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestKeyModel runs TEMPOTENT_EXPLORE_KEYS_N random programs (default 300: two seconds, six with -race) from
// TEMPOTENT_EXPLORE_SEED (default 1), each in two workflows of different IDs, and checks every
// activity's key against the model. A failing program prints its seed and its code;
// TEMPOTENT_EXPLORE_SEED=<seed> TEMPOTENT_EXPLORE_KEYS_N=1 replays it alone.
func TestKeyModel(t *testing.T) {
	t.Parallel()
	n := envInt("TEMPOTENT_EXPLORE_KEYS_N", 300)
	seed := uint64(envInt("TEMPOTENT_EXPLORE_SEED", 1))
	for i := range uint64(n) {
		s := seed + i
		p := genProgram(rand.New(rand.NewPCG(s, 0x6b657973)))
		if msg := checkProgram(t, p); msg != "" {
			t.Fatalf("key model: program with seed %d failed: %s\n%s\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_KEYS_N=1 go test -v -run TestKeyModel ./keys/",
				s, msg, p, s)
		}
	}
	t.Logf("key model: %d programs from seed %d, every key as the model says", n, seed)
}

// checkProgram runs p in two workflows and returns what differs from the model, or "".
func checkProgram(t *testing.T, p Program) string {
	t.Helper()
	var (
		got  []string
		want []expected
	)
	for _, workflowID := range []string{"order-1", "orders/eu#1"} {
		g, err := runProgram(t, workflowID, p)
		if err != nil {
			return fmt.Sprintf("workflow %s failed: %v", workflowID, err)
		}
		m := &model{namespace: "default-test-namespace", tenant: "acme", workflowID: workflowID, runID: "default-test-run-id", epoch: "default-test-run-id", counts: map[string]int{}}
		m.run(p.Main, "")
		for _, u := range p.Updates {
			m.run(u.Body, u.ID)
		}
		if len(g) != len(m.out) {
			return fmt.Sprintf("workflow %s scheduled %d activities, the model %d: %q", workflowID, len(g), len(m.out), g)
		}
		got, want = append(got, g...), append(want, m.out...)
	}
	return compareModel(got, want)
}

// compareModel returns what differs between the records of activities and the model's verdicts
// on them, or "".
func compareModel(got []string, want []expected) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d activities were scheduled, the model says %d: %q", len(got), len(want), got)
	}
	for i, w := range want {
		switch {
		case w.refused:
			if !strings.HasPrefix(got[i], "refused: ") || !strings.Contains(got[i], keys.ErrPinnedContext.Error()) {
				return fmt.Sprintf("activity %d: got %q, the model refuses it (%v)", i, got[i], keys.ErrPinnedContext)
			}
		case got[i] != w.key.Operation+" "+w.key.ID:
			return fmt.Sprintf("activity %d: got %q, the model's key is %q", i, got[i], w.key.Operation+" "+w.key.ID)
		}
	}
	// One intent, one key; two intents, two keys: across both workflows.
	for i := range want {
		for j := range i {
			if want[i].intent == "" || want[j].intent == "" {
				continue
			}
			if same := got[i] == got[j]; same != (want[i].intent == want[j].intent) {
				return fmt.Sprintf("activities %d and %d: same key %v (%q, %q), one intent in the model %v", j, i, same, got[j], got[i], !same)
			}
		}
	}
	return ""
}

type updateDone struct{ err *error }

func (u updateDone) Accept()          {}
func (u updateDone) Reject(err error) { *u.err = err }
func (u updateDone) Complete(_ any, err error) {
	if err != nil {
		*u.err = err
	}
}

func runProgram(t *testing.T, workflowID string, p Program) ([]string, error) {
	t.Helper()
	env := newEnv(t, workflowID, "acme", false)
	env.RegisterWorkflowWithOptions(modelWorkflow, workflow.RegisterOptions{Name: "model"})
	env.RegisterWorkflowWithOptions(keyedChild, workflow.RegisterOptions{Name: "keyed-child"})
	for _, typ := range modelTypes {
		env.RegisterActivityWithOptions(activityKey, activity.RegisterOptions{Name: typ})
	}
	var updateErr error
	for i, u := range p.Updates {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow("run", u.ID, updateDone{&updateErr}, i)
		}, time.Duration(i+1)*time.Second)
	}
	env.ExecuteWorkflow("model", p)
	if err := env.GetWorkflowError(); err != nil {
		return nil, err
	}
	if updateErr != nil {
		return nil, fmt.Errorf("update: %w", updateErr)
	}
	var out []string
	if err := env.GetWorkflowResult(&out); err != nil {
		return nil, err
	}
	return out, nil
}
