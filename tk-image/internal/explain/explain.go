// Package explain answers "why was (or wasn't) my image updated" from what
// the controllers record in status: for an ImagePolicy, its repository's
// last scan and how the policy's rules treated the tags; for an
// ImageUpdateAutomation, its policies against what its last job applied, the
// branch head, the last job and the markers. It reads objects through a
// controller-runtime client and computes nothing the controllers do not
// record, except the markers of a local checkout (a dry run of the
// setters) and the branch head (listed from the git server), so it cannot
// disagree with them. An explanation prints as text, or marshals to YAML or
// JSON through its exported fields; tk-image's explain command is the front
// end.
package explain

import (
	"io"
	"time"
)

// UsageError says the command line was wrong (tk-image exits 2 for it).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Explanation is what explain prints: as text, or as YAML or JSON (its
// exported fields).
type Explanation interface {
	Text(w io.Writer)
}

// defaultHeadTimeout bounds listing the branch head: the controllers'
// default of a minute is long for a command someone waits on; a shorter
// repository timeout wins.
const defaultHeadTimeout = 30 * time.Second

// maxScanSites is how many marker places per policy a --scan-checkout
// explanation lists (the count stays exact).
const maxScanSites = 5
