package v1beta1

// Condition reasons of UpdateJob, beside the shared ones in
// pkg/runtime/conditions (Succeeded, Progressing, Failed, InvalidSpec,
// SecretNotFound, AuthenticationFailed, GitOperationFailed).
const (
	// UpdateFailedReason: the image setters could not update the files.
	UpdateFailedReason = "UpdateFailed"
	// VerifiedImageMovedReason: a setter's image was verified (ImagePolicy
	// spec.verify) and its tag no longer points to the verified digest
	// right before the commit, or could not be read to check: nothing is
	// committed. The policy verifies the new digest and makes a new job.
	VerifiedImageMovedReason = "VerifiedImageMoved"
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
	// ContainerFailedReason: a container-mode job's container (or one of
	// its Pod's steps) exited non-zero, or could not be started; the
	// message has the exit code and the tail of its termination message.
	ContainerFailedReason = "ContainerFailed"
	// ContainerTimedOutReason: a container-mode job's Pod did not finish
	// within spec.update.container.timeout.
	ContainerTimedOutReason = "ContainerTimedOut"
	// ImagePullFailedReason: the container's image could not be pulled
	// (ErrImagePull, ImagePullBackOff, InvalidImageName).
	ImagePullFailedReason = "ImagePullFailed"
	// ContainerModeUnavailableReason: the job asks for a container, but the
	// controller has no --transfer-address or --step-image.
	ContainerModeUnavailableReason = "ContainerModeUnavailable"
)
