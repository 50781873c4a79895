package v1beta1

// Condition reasons of UpdateJob, beside the shared ones in
// pkg/runtime/conditions (Succeeded, Progressing, Failed, InvalidSpec).
const (
	// GitOperationFailedReason: a fetch, checkout, commit or push failed.
	GitOperationFailedReason = "GitOperationFailed"
	// AuthenticationFailedReason: the git server refused the credentials,
	// or a host key or certificate did not verify.
	AuthenticationFailedReason = "AuthenticationFailed"
	// SecretNotFoundReason: a Secret the job refers to does not exist.
	SecretNotFoundReason = "SecretNotFound"
	// UpdateFailedReason: the image setters could not update the files.
	UpdateFailedReason = "UpdateFailed"
	// NoChangeReason: the files already held the policies' values.
	NoChangeReason = "NoChange"
	// DeadlineExceededReason: the job ran past activeDeadlineSeconds.
	DeadlineExceededReason = "DeadlineExceeded"
	// ClaimedReason: a runner claimed the job and is working on it.
	ClaimedReason = "Claimed"
)
