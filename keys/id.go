package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// How a Key.ID is spelled. Every ID that this package derives or builds is
//
//	<tag>:<part>/<part>/…
//
// where the tag names the scope the ID comes from and each part is one value of the intent's
// identity, percent-escaped: '%' as "%25", '/' as "%2F" and '#' as "%23", and nothing else, so
// that ordinary IDs read as they were given. The workflow scope's last part is the step name,
// escaped, then '#' and its occurrence, which needs no escaping.
//
//	wf:<workflow ID>/<epoch>/<step>#<n>            workflow scope, the default (see epoch.go)
//	run:<workflow ID>/<run ID>/<step>#<n>          run scope (WithRunScope)
//	upd:<workflow ID>/<update ID>/<step>#<n>       update scope (activities of an update handler)
//	activity:<activity ID>/<activity run ID>       a standalone activity (no workflow)
//	explicit:<id>                                  explicit business key (WithID, Given, Explicit)
//	comp:<forward operation>/<forward token>       Key.Compensation, WithCompensation
//	item:<batch token>/<item ID>                   Key.Item, one item of a batch
//
// Why no two identities share an ID:
//
//   - No tag contains ':', so the text before an ID's first ':' is its tag, and IDs with
//     different tags differ. In particular an explicit ID, whatever the caller chose (even
//     "wf:…"), is stored as "explicit:" and that text, and never equals a derived ID.
//   - Within a tag, escaped parts contain no '/', so the separators are exactly the '/'s, and
//     percent-escaping with '%' itself escaped is reversible: one string, one tuple of parts. In
//     the step part the escaped name contains no '#', so the last '#' separates the occurrence.
//     An explicit ID is a single part and needs no escaping.
//   - A derived ID longer than MaxIDLen is replaced by "<tag>:sha256:<64 hex digits>", the
//     SHA-256 of the whole unhashed ID. That form has no '/', while every unhashed derived ID
//     has at least one separator (all derived scopes have two parts or more), so a hashed ID
//     never equals an unhashed one, and hashed IDs of different scopes differ by their tag. Two
//     hashed IDs of one scope are equal only if SHA-256 collides on two different unhashed
//     IDs. Explicit IDs are never hashed (see MaxKeyIDLen), so "explicit:sha256:…" is always
//     the caller's own text.
//
// Upgrading: earlier versions joined the parts unescaped and untagged ("sha256:<hex>" for
// hashed IDs, the caller's explicit ID as given, "compensates:<op>:<token>" for compensations).
// Explicit IDs, compensation IDs, hashed IDs and derived IDs whose parts contain '%', '/' or '#'
// are spelled differently now, so their tokens differ too: an intent in flight across the
// upgrade gets a new key, a new receipt and a new downstream token, and can take effect twice.
// Drain workers (let running workflows finish their activities) before upgrading.
const (
	tagWorkflow     = "wf"
	tagRun          = "run"
	tagUpdate       = "upd"
	tagActivity     = "activity"
	tagExplicit     = "explicit"
	tagCompensation = "comp"
	tagItem         = "item"
)

var partEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "#", "%23")

// joinParts spells tag, ':' and parts, escaped and joined by '/'.
func joinParts(tag string, parts ...string) string {
	var b strings.Builder
	b.WriteString(tag)
	b.WriteByte(':')
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('/')
		}
		_, _ = partEscaper.WriteString(&b, p) // a strings.Builder does not fail
	}
	return b.String()
}

// stepPart spells a step with its occurrence, "name#n" as the workflow-side interceptor writes it
// in the step header: the name escaped, then '#' and the decimal occurrence. A step header that
// does not end in '#' and digits (written by hand, not by Interceptor) is escaped whole, so it
// contains no '#' and cannot spell a name with an occurrence.
func stepPart(step string) string {
	if i := strings.LastIndexByte(step, '#'); i >= 0 && isDigits(step[i+1:]) {
		return partEscaper.Replace(step[:i]) + step[i:]
	}
	return partEscaper.Replace(step)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// workflowScopeID is the workflow-scope ID of a step ("name#n") in a run's epoch.
func workflowScopeID(workflowID, epoch, step string) string {
	return shorten(tagWorkflow, joinParts(tagWorkflow, workflowID, epoch)+"/"+stepPart(step))
}

func runScopeID(workflowID, runID, step string) string {
	return shorten(tagRun, joinParts(tagRun, workflowID, runID)+"/"+stepPart(step))
}

func updateScopeID(workflowID, updateID, step string) string {
	return shorten(tagUpdate, joinParts(tagUpdate, workflowID, updateID)+"/"+stepPart(step))
}

func standaloneScopeID(activityID, activityRunID string) string {
	return shorten(tagActivity, joinParts(tagActivity, activityID, activityRunID))
}

// explicitScopeID tags an explicit ID that ValidateID accepted; it is at most MaxKeyIDLen bytes.
func explicitScopeID(id string) string { return tagExplicit + ":" + id }

func compensationID(forwardOperation string, forward Token) string {
	return shorten(tagCompensation, joinParts(tagCompensation, forwardOperation, string(forward)))
}

func itemID(batch Token, id string) string {
	return shorten(tagItem, joinParts(tagItem, string(batch), id))
}

// shorten keeps a derived ID within MaxIDLen by replacing an over-long one with its hash, tagged
// by scope: workflow IDs may be up to Temporal's own limit, which is larger than a receipts row
// wants. See the comment on the tags for why a hashed ID never equals an unhashed one.
func shorten(tag, id string) string {
	if len(id) <= MaxIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return tag + ":sha256:" + hex.EncodeToString(sum[:])
}
