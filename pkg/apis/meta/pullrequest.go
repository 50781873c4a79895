package meta

// PullRequestState is the state of a pull request.
// +kubebuilder:validation:Enum=open;closed;merged
type PullRequestState string

const (
	PullRequestOpen   PullRequestState = "open"
	PullRequestClosed PullRequestState = "closed"
	PullRequestMerged PullRequestState = "merged"
)

// PullRequestStatus is a pull (merge) request as a job left it: the
// write-back engine's result, an UpdateJob's status and an automation's
// last request all carry this one type.
type PullRequestStatus struct {
	// URL is the request's web page.
	URL string `json:"url"`
	// Number of the request in its repository (GitLab's IID).
	Number int `json:"number"`
	// State of the request when the job finished.
	State PullRequestState `json:"state"`
	// HeadBranch is the branch the request merges from.
	HeadBranch string `json:"headBranch"`
	// HeadCommit is the head branch's commit.
	// +optional
	HeadCommit string `json:"headCommit,omitempty"`
	// Action is what the job did: opened, updated (new commit or
	// description), unchanged (already up to date) or closed (the base has
	// the change).
	// +kubebuilder:validation:Enum=opened;updated;unchanged;closed
	Action PullRequestAction `json:"action"`
}

// PullRequestAction is what a job did to its request.
type PullRequestAction string

const (
	PullRequestOpened    PullRequestAction = "opened"
	PullRequestUpdated   PullRequestAction = "updated"
	PullRequestUnchanged PullRequestAction = "unchanged"
	PullRequestClosedNow PullRequestAction = "closed"
)
