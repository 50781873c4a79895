package v1beta1

// Condition reasons of UpdateJob, beside the shared ones in
// pkg/runtime/conditions (Succeeded, Progressing, Failed, InvalidSpec,
// SecretNotFound, AuthenticationFailed, GitOperationFailed).
const (
	// UpdateFailedReason: the image setters could not update the files.
	UpdateFailedReason = "UpdateFailed"
	// NoChangeReason: the files already held the policies' values.
	NoChangeReason = "NoChange"
	// DeadlineExceededReason: the job ran past activeDeadlineSeconds.
	DeadlineExceededReason = "DeadlineExceeded"
	// ClaimedReason: a runner claimed the job and is working on it.
	ClaimedReason = "Claimed"
	// PullRequestFailedReason: the forge refused a pull request call; the
	// message says what it answered.
	PullRequestFailedReason = "PullRequestFailed"
	// RateLimitedReason: the forge's rate limit was exhausted for longer
	// than a request waits; the job retries after the reset.
	RateLimitedReason = "RateLimited"
)
