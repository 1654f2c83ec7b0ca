package activitytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/internal/proc"
)

// A takeover after a crash runs in another process, as Temporal runs it on another worker: the
// test binary runs again with only the test in hand selected (go test's -test.run), and with
// workerEnv set that process is a worker for one attempt. The test's function runs from its
// start, and activitytest's constructors give it what the first process made instead of making
// new ones: the same stores (schemas), the same Downstreams and FaultProxies (their URLs). At the
// RequireRetrySafe call in hand, it runs the one attempt, writes its outcome to a file, and
// exits. Whatever else the test built — a client, a cache, a fake kept in memory — is new, as
// it is on a worker that starts after a crash.
const workerEnv = "TEMPOTENT_ACTIVITYTEST_WORKER"

// workerTask is what the first process tells the worker process.
type workerTask struct {
	Test   string // the test's name (tb.Name())
	Call   int    // which RequireRetrySafe call of that test, from 1
	ID     string // the intent's ID (keys.Given)
	Who    identityJSON
	Made   map[string]made // what each test on the way to Test made, by its name
	Result string          // the file to write the outcome to
}

type identityJSON struct {
	RunID, ActivityID string
	Attempt           int32
}

// made is what one test made with activitytest's constructors, in the order it made them.
type made struct {
	Stores, Downstreams, Proxies []string // schemas, URLs
}

// workerOutcome is what the worker process writes.
type workerOutcome struct {
	Out          json.RawMessage
	Err          string
	ErrType      string
	NonRetryable bool
	Effects      counts // the effects the check counted in the worker process, by item
}

// asWorker is the task of this process when it is a worker process; nil otherwise.
var asWorker = func() *workerTask {
	v := os.Getenv(workerEnv)
	if v == "" {
		return nil
	}
	var t workerTask
	if err := json.Unmarshal([]byte(v), &t); err != nil {
		fmt.Fprintf(os.Stderr, "activitytest: %s is not a task: %v\n", workerEnv, err)
		os.Exit(2)
	}
	return &t
}()

// registry remembers, by test name, what the constructors made and how many RequireRetrySafe
// calls each test made: the first process to tell a worker process, the worker process to hand
// back the same things in the same order.
var registry = struct {
	sync.Mutex
	made  map[string]*made
	taken map[string]*made // in a worker process: what each test has taken so far
	calls map[string]int
}{made: map[string]*made{}, taken: map[string]*made{}, calls: map[string]int{}}

// remember records what a test made: kind is "store", "downstream" or "proxy".
func remember(tb testing.TB, kind, v string) {
	registry.Lock()
	defer registry.Unlock()
	m := registry.made[tb.Name()]
	if m == nil {
		m = &made{}
		registry.made[tb.Name()] = m
	}
	switch kind {
	case "store":
		m.Stores = append(m.Stores, v)
	case "downstream":
		m.Downstreams = append(m.Downstreams, v)
	case "proxy":
		m.Proxies = append(m.Proxies, v)
	}
}

// inherited returns, in a worker process, the next thing of kind that the first process made
// for tb's test; ok is false outside a worker process, or when the first process made no such
// thing (the test made more than it did: it then makes its own).
func inherited(tb testing.TB, kind string) (string, bool) {
	if asWorker == nil {
		return "", false
	}
	registry.Lock()
	defer registry.Unlock()
	from := asWorker.Made[tb.Name()]
	t := registry.taken[tb.Name()]
	if t == nil {
		t = &made{}
		registry.taken[tb.Name()] = t
	}
	var list []string
	var next *[]string
	switch kind {
	case "store":
		list, next = from.Stores, &t.Stores
	case "downstream":
		list, next = from.Downstreams, &t.Downstreams
	case "proxy":
		list, next = from.Proxies, &t.Proxies
	}
	if len(*next) >= len(list) {
		return "", false
	}
	v := list[len(*next)]
	*next = append(*next, v)
	return v, true
}

// nextCall counts tb's test's RequireRetrySafe calls and returns this one's number.
func nextCall(tb testing.TB) int {
	registry.Lock()
	defer registry.Unlock()
	registry.calls[tb.Name()]++
	return registry.calls[tb.Name()]
}

// runPattern is go test's -test.run pattern that selects exactly the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// errNoWorkerProcess says that the test binary could not run the attempt in a process of its
// own: the check's testing.TB is not a test's (an example's), or the binary is not a test.
var errNoWorkerProcess = errors.New("no worker process")

// inWorkerProcess runs the attempt of intent id with identity who in a new process of the test
// binary, and returns its outcome and the effects that process counted itself.
func inWorkerProcess[Out any](tb testing.TB, call int, id string, who identity) (attempt[Out], counts, error) {
	var a attempt[Out]
	bin, err := os.Executable()
	if err != nil || !testing.Testing() {
		return a, nil, errNoWorkerProcess
	}
	dir, err := os.MkdirTemp("", "activitytest-worker-")
	if err != nil {
		return a, nil, fmt.Errorf("a directory for the worker process's outcome: %w", err)
	}
	defer os.RemoveAll(dir)
	task := workerTask{Test: tb.Name(), Call: call, ID: id, Made: map[string]made{},
		Who:    identityJSON{RunID: who.runID, ActivityID: who.activityID, Attempt: who.attempt},
		Result: filepath.Join(dir, "outcome.json")}
	registry.Lock()
	for name, m := range registry.made {
		if name == tb.Name() || strings.HasPrefix(tb.Name(), name+"/") {
			task.Made[name] = *m
		}
	}
	registry.Unlock()
	env, _ := json.Marshal(task)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run="+runPattern(tb.Name()), "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(env))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := proc.Start(cmd) // dies with this process
	if err == nil {
		err = p.Wait()
	}
	b, rerr := os.ReadFile(task.Result)
	if rerr != nil {
		if strings.Contains(out.String(), "no tests to run") {
			return a, nil, errNoWorkerProcess
		}
		return a, nil, fmt.Errorf("the worker process wrote no outcome (%v): %s", err, tail(out.String(), 2000))
	}
	var o workerOutcome
	if err := json.Unmarshal(b, &o); err != nil {
		return a, nil, fmt.Errorf("the worker process's outcome: %w", err)
	}
	if o.Err != "" {
		a.err = temporal.NewApplicationErrorWithOptions(o.Err, o.ErrType, temporal.ApplicationErrorOptions{NonRetryable: o.NonRetryable})
	} else if len(o.Out) > 0 {
		if err := json.Unmarshal(o.Out, &a.out); err != nil {
			return a, nil, fmt.Errorf("the worker process's result: %w", err)
		}
	}
	return a, o.Effects, nil
}

// asWorkerAttempt runs, in a worker process, the attempt it was started for when this is the
// RequireRetrySafe call it was started for, writes its outcome, and exits; it returns
// whether this process is a worker process (whose other calls do nothing).
func asWorkerAttempt[In, Out any](r *runner[In, Out], call int) bool {
	if asWorker == nil {
		return false
	}
	if r.tb.Name() != asWorker.Test || call != asWorker.Call {
		return true
	}
	before := r.fx.now()
	a := r.execute(asWorker.ID, identity{runID: asWorker.Who.RunID, activityID: asWorker.Who.ActivityID, attempt: asWorker.Who.Attempt}, r.c.Input, nil)
	o := workerOutcome{Effects: r.fx.since(before)}
	if a.err != nil {
		o.Err = a.err.Error()
		var appErr *temporal.ApplicationError
		if errors.As(a.err, &appErr) {
			o.Err, o.ErrType, o.NonRetryable = appErr.Message(), appErr.Type(), appErr.NonRetryable()
		} else {
			o.NonRetryable = !retryable(a.err)
		}
	} else {
		o.Out, _ = json.Marshal(a.out)
	}
	b, _ := json.Marshal(o)
	if err := os.WriteFile(asWorker.Result, b, 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "activitytest: write the outcome: %v\n", err)
		os.Exit(2)
	}
	os.Exit(0)
	return true
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
