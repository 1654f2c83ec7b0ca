// Package failpoint stops a process at a named point so that fault tests can kill it there with
// a real signal.
//
// Failpoints are test-only machinery and are compiled only with the build tag
// tempotent_failpoints (as etcd's gofail and TiDB's failpoint do):
//
//	go build -tags tempotent_failpoints -o worker ./worker
//
// Without the tag, which is every shipped build, Hit is an empty function that the compiler
// inlines away: the environment is never read and no point can stop the process. The fault tests
// in faults/ build their worker with the tag.
//
// In a build with the tag, Hit does nothing unless the environment variable TEMPOTENT_FAILPOINTS
// names points, as comma-separated name=action pairs:
//
//	TEMPOTENT_FAILPOINTS=activity.after-downstream=pause
//
// Actions: "pause" blocks the goroutine that reached the point forever (the test then sends
// SIGKILL or SIGSTOP), "kill" kills the process itself (SIGKILL on unix). On reaching a point it
// writes "failpoint <name> reached" to stderr, which the test waits for.
package failpoint

// Names of the points compiled into tempotent and its sample.
const (
	AfterReserve    = "activity.after-reserve"    // the receipt is reserved; the function has not run
	AfterDownstream = "activity.after-downstream" // the function returned; its outcome is not recorded
	AfterComplete   = "activity.after-complete"   // the outcome is recorded; Temporal has not heard of it
	InCompensation  = "sample.in-compensation"    // a compensation's downstream call returned
	AfterPublish    = "outbox.after-publish"      // a batch is published; its results are not marked
	AfterConsume    = "sample.after-consume"      // the notifier committed a message; it has not answered
	AfterFence      = "shard.after-fence"         // a move fenced its tenant; nothing is copied yet
	AfterCopy       = "shard.after-copy"          // a move copied its tenant's receipts; it has not switched
)

// EnvVar names the failpoints to arm. It is read only by builds with the tag
// tempotent_failpoints.
const EnvVar = "TEMPOTENT_FAILPOINTS"

// Tag is the build tag that compiles the failpoints in.
const Tag = "tempotent_failpoints"
