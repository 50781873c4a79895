package v1beta1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// UpdateJobKind is the kind name of UpdateJob.
const UpdateJobKind = "UpdateJob"

// UpdateJobSpec is a one-off update of a git repository: check out a ref, run
// the image setters, commit and push. It is immutable once created.
// +kubebuilder:validation:XValidation:rule="has(self.checkout.ref.branch) || (has(self.push) && (has(self.push.branch) || has(self.push.refspec) || (has(self.push.pullRequest) && has(self.push.pullRequest.base))))",message="a job that does not check out a branch needs push.branch, push.refspec or push.pullRequest.base"
type UpdateJobSpec struct {
	// Repository to update.
	// +required
	Repository GitRepositorySpec `json:"repository"`

	// Checkout says which revision the update starts from.
	// +required
	Checkout GitCheckoutSpec `json:"checkout"`

	// Update says what to change.
	// +required
	Update UpdateSpec `json:"update"`

	// Commit says how to write the commit.
	// +required
	Commit CommitSpec `json:"commit"`

	// Push says where to push; defaults to the checkout branch.
	// +optional
	Push *PushSpec `json:"push,omitempty"`

	// BackoffLimit is the number of retries after a failed attempt.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// TTLSecondsAfterFinished deletes the job this long after it finished
	// (Succeeded, NoChange or Failed); unset keeps it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// ActiveDeadlineSeconds bounds the job's run time across attempts.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// Members are the updates of further automations that this job's
	// commit carries beside its own (spec.update): a batch, made by the
	// image-automation-controller from the automations of one branch
	// that were ready at the same time. Each member is an automation's
	// own update and commit message; the repository, checkout, push and
	// author are the job's. status.members has each one's outcome, and
	// View gives an automation the job as if it were its own. The list
	// is atomic: one entry of managedFields, not one per field of each
	// member, which were a third of a full batch's size, and every write
	// of the job is a write of all of it (the image-automation-controller
	// makes it whole, no one applies to a part of it).
	// +kubebuilder:validation:MaxItems=500
	// +listType=atomic
	// +optional
	Members []UpdateJobMember `json:"members,omitempty"`
}

// UpdateSpec says which files to update with which image policy values, or
// which container updates them.
// +kubebuilder:validation:XValidation:rule="(has(self.setters) && size(self.setters) > 0) || has(self.discover) || has(self.container)",message="set setters, discover or container"
// +kubebuilder:validation:XValidation:rule="!has(self.container) || ((!has(self.setters) || size(self.setters) == 0) && !has(self.discover))",message="container runs instead of the setters: setters and discover cannot be set with it"
type UpdateSpec struct {
	// Path within the repository to update; the root when empty. Paths that
	// leave the checkout are rejected.
	// +kubebuilder:validation:MaxLength=4096
	// A match, not a split: a batch's members each have a path, and the
	// API server bounds the rules' estimated cost per object.
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="path must be relative and stay inside the repository"
	// +optional
	Path string `json:"path,omitempty"`

	// Setters are the policy values that markers
	// (# {"$imagepolicy": "NAMESPACE:NAME"}) are set to, and, with
	// discover, the discovered images of the same name.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=map
	// +listMapKey=policy
	// +optional
	Setters []PolicySetter `json:"setters,omitempty"`

	// Discover makes the job find the images of the checkout under Path
	// itself (pkg/discover): each discovered location of an image a setter
	// names (by image name) is updated as a marker there would be, and
	// status.result.discovered lists what it found.
	// +optional
	Discover *DiscoverSpec `json:"discover,omitempty"`

	// Container runs this container on a checkout of the files under Path
	// instead of the setters (container mode): the controller commits
	// whatever it added, changed or deleted there and pushes, as for the
	// setters. It runs in a Pod of the job's namespace with the restricted
	// Pod Security profile, without the repository's credentials or a
	// ServiceAccount token. See docs/container-mode.md.
	// +optional
	Container *UpdateContainer `json:"container,omitempty"`

	// ArgoCD are Argo CD parameter override files to write the setters'
	// images into, each under Path.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=map
	// +listMapKey=file
	// +optional
	ArgoCD []ArgoCDOverride `json:"argoCD,omitempty"`

	// Holds makes the job leave a marked value alone when a person set it
	// over the automation's (a hand rollback or pin): the commit that last
	// changed its line is not the automation's (by the commit author, the
	// spec.commit.author email), and the value it replaced was. The job
	// reports each in status.result.holds. Without it, every marked value
	// is set.
	// +optional
	Holds *HoldSpec `json:"holds,omitempty"`

	// Charts are Argo CD Applications whose chart sources' targetRevision
	// the setters' chart versions are written to, found by name.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Charts []ChartUpdate `json:"charts,omitempty"`

	// Files are values set in files that cannot carry a marker, by a JSON
	// Pointer and a setter's key.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Files []meta.FileUpdate `json:"files,omitempty"`
}

// ChartUpdate writes a setter's tag (the chart version) into the
// targetRevision of the chart sources of an Argo CD Application's
// manifest under Path.
type ChartUpdate struct {
	// Policy is the setter's key (NAMESPACE:NAME).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +required
	Policy string `json:"policy"`

	meta.ArgoCDChart `json:",inline"`
}

// HoldSpec says which holds a job overrides all the same.
type HoldSpec struct {
	// Released are holds that ended (a newer image, a release, holdFor):
	// their values are set as if no person had set them. A hold is
	// released only for its commit: a later hand edit of the same value is
	// a new hold.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Released []HoldKey `json:"released,omitempty"`
}

// HoldKey names one hold: the marked value and the commit that set it.
type HoldKey struct {
	// Path of the file, relative to the repository's root.
	// +kubebuilder:validation:MaxLength=4096
	// +required
	Path string `json:"path"`
	// Setter is the marker, e.g. apps:podinfo or apps:podinfo:tag.
	// +kubebuilder:validation:MaxLength=512
	// +required
	Setter string `json:"setter"`
	// Commit is the commit that set the held value.
	// +kubebuilder:validation:MaxLength=64
	// +required
	Commit string `json:"commit"`
}

// Hold is a marked value a person set over the automation's, which a job
// left as it is.
type Hold struct {
	HoldKey `json:",inline"`
	// Line of the value in the file, from 1, when the job saw it.
	// +optional
	Line int `json:"line,omitempty"`
	// Value is the held value, as the file has it.
	Value string `json:"value"`
	// From is the value the automation had written, which the person
	// replaced (rolled back from).
	// +optional
	From string `json:"from,omitempty"`
	// Want is the value the policy chose, which the job did not write:
	// why the hold matters.
	// +optional
	Want string `json:"want,omitempty"`
	// Author of the commit, as Name <email>.
	// +optional
	Author string `json:"author,omitempty"`
	// Since is the commit's author time.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// HeldWith is, for a value held only because it belongs to a
	// promotion group (its policy's setter names a group, PolicySetter's
	// group) with a held member, that member's policy (NAMESPACE:NAME):
	// the group moves together. Commit and Author are empty then.
	// +optional
	HeldWith string `json:"heldWith,omitempty"`
}

// MaxHolds bounds the holds a job's result and an automation's status list.
const MaxHolds = 100

// ArgoCDOverride is one Argo CD parameter override file
// (.argocd-source-<app>.yaml) and the images to write into it; what else it
// holds is kept.
type ArgoCDOverride struct {
	// File is the file's path in the repository, under Path (the job
	// refuses a path that is not clean and relative before any fetch).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +required
	File string `json:"file"`

	// Type is how Argo CD renders the source: Kustomize (kustomize.images)
	// or Helm (helm.parameters).
	// +kubebuilder:validation:Enum=Kustomize;Helm
	// +required
	Type string `json:"type"`

	// Images are the setters to write, and where.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +required
	Images []ArgoCDOverrideImage `json:"images"`
}

// ArgoCDOverrideImage is one setter's image in an override file.
type ArgoCDOverrideImage struct {
	// Policy is the setter's key (NAMESPACE:NAME) whose image is written.
	// +kubebuilder:validation:MinLength=1
	// +required
	Policy string `json:"policy"`
	// Where the override file holds the image.
	meta.ArgoCDImageFields `json:",inline"`
}

// UpdateContainer is the container of a container-mode job.
type UpdateContainer struct {
	// Image to run, e.g. ghcr.io/image-toolkit/tk-image:v0.1.0.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Image string `json:"image"`

	// ImagePullPolicy of the image: Always, Never or IfNotPresent; the
	// Kubernetes default when empty.
	// +kubebuilder:validation:Enum=Always;Never;IfNotPresent
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets name Secrets of the job's namespace for pulling
	// the image (and the steps' image, the controller's).
	// +kubebuilder:validation:MaxItems=20
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Command replaces the image's entrypoint.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Command []string `json:"command,omitempty"`

	// Args replace the image's arguments.
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Args []string `json:"args,omitempty"`

	// Env of the container. Values from the job's own Secrets or
	// ConfigMaps (valueFrom) are the only credentials the container sees.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// EnvFrom adds the keys of Secrets or ConfigMaps of the job's namespace
	// to the environment.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// Resources of the container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// WorkingDir of the container; /workspace/PATH (the update path in the
	// checkout) when empty.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`

	// Timeout bounds each run of the container's Pod, from its creation
	// (image pull and checkout included) to the upload of the result.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(s|m|h))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// The Pods of container-mode jobs: their labels, and the name of the
// user's container, for tools that find them (tk-image job logs).
const (
	// PodJobNameLabel is the job's name (left out for names over 63
	// characters); PodJobUIDLabel its UID.
	PodJobNameLabel = "update.toolkit.dev/job-name"
	PodJobUIDLabel  = "update.toolkit.dev/job-uid"
	// PodAttemptLabel is status.attempts when the Pod was made;
	// PodRoundLabel counts the non-fast-forward rounds of the attempt
	// from 0.
	PodAttemptLabel = "update.toolkit.dev/attempt"
	PodRoundLabel   = "update.toolkit.dev/round"
	// UserContainerName is the container running spec.update.container.
	UserContainerName = "update"
)

// ContainerStatus is where a container-mode job's last container ran, so
// that its logs can be found (tk-image job logs).
type ContainerStatus struct {
	// PodName is the Pod of the last run.
	PodName string `json:"podName"`
	// ContainerName is the user's container in that Pod.
	ContainerName string `json:"containerName"`
	// ExitCode of the container, once it ended.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Reason the container ended or is waiting, as the kubelet says it
	// (Completed, Error, OOMKilled, ImagePullBackOff, ...), or
	// DeadlineExceeded.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// DiscoverSpec says which discovered images a job reports and updates.
type DiscoverSpec struct {
	// Include are patterns of image names (canonical, e.g.
	// docker.io/library/nginx; path.Match syntax, so * stays within a
	// path segment: ghcr.io/acme/*); every image when empty.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Include []string `json:"include,omitempty"`

	// Exclude are patterns of image names left alone, over Include.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Exclude []string `json:"exclude,omitempty"`

	// WriteMarkers makes the commit also write a $imagepolicy marker on
	// each location it updates, so the repository becomes explicit.
	// +optional
	WriteMarkers bool `json:"writeMarkers,omitempty"`
}

// PolicySetter is the value of one image policy.
type PolicySetter struct {
	// Policy is NAMESPACE:NAME, as written in markers.
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
	// +kubebuilder:validation:MaxLength=317
	// +required
	Policy string `json:"policy"`

	// The image: name, tag (or chart version) and optional digest.
	meta.ImageRef `json:",inline"`

	// LatestRefTime is when the ImagePolicy picked this image. An
	// ImageUpdateAutomation sets it on the setters whose value its job
	// changes, for the policy-to-push latency metric.
	// +optional
	LatestRefTime *metav1.Time `json:"latestRefTime,omitempty"`

	// Verified is set when the ImagePolicy verified Digest's signature
	// (spec.verify), or promoted Digest from an upstream environment
	// (policy.promotion): right before the commit, the job reads the
	// digest Name:Tag points to and fails, reason VerifiedImageMoved,
	// when it is no longer the digest the policy chose. So a tag
	// re-pushed after the check is never written, also by markers that
	// write the tag only.
	// +optional
	Verified *VerifiedImage `json:"verified,omitempty"`

	// Source is what the image says it was built from, and the image the
	// policy chose before with its source (the ImagePolicy's
	// status.latestSource and observedPrevious*): the commit and the pull
	// request name the source revisions a change brings.
	// +optional
	Source *meta.ImageSourceChange `json:"source,omitempty"`

	// Approval is who approved the image for a promotion with approval
	// Required (the ImagePolicy's status.promotion.approval): the commit
	// gets an Approved-by trailer, the pull request names the approver.
	// +optional
	Approval *meta.Approval `json:"approval,omitempty"`

	// Group names the promotion group the image was promoted with (its
	// upstream automation and commit): with holds, a person's hold of one
	// member's value holds the values of the others, which moved with it
	// upstream.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Group string `json:"group,omitempty"`
}

// VerifiedImage says how to read a verified image's tag again.
type VerifiedImage struct {
	// ImageRepository is the ImagePolicy's ImageRepository, whose
	// secretRef, certSecretRef and insecure reach the registry.
	// +required
	ImageRepository meta.NamespacedObjectReference `json:"imageRepository"`
	// Digest is the digest the tag must still point to, when it is not
	// the setter's Digest: with a platform, the setter writes the
	// platform's manifest and the tag points to the index that verified.
	// +optional
	Digest string `json:"digest,omitempty"`
}

// UpdateJobPhase is where an UpdateJob is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;NoChange;Failed
type UpdateJobPhase string

const (
	// UpdateJobPending waits for a runner to claim it.
	UpdateJobPending UpdateJobPhase = "Pending"
	// UpdateJobRunning is claimed by the runner in status.runner.
	UpdateJobRunning UpdateJobPhase = "Running"
	// UpdateJobSucceeded pushed a commit; with a pull request, opened or
	// updated the request.
	UpdateJobSucceeded UpdateJobPhase = "Succeeded"
	// UpdateJobNoChange found nothing to change, and pushed nothing; with a
	// pull request, the request was already up to date, or the base had
	// the change (an open request is then closed).
	UpdateJobNoChange UpdateJobPhase = "NoChange"
	// UpdateJobFailed gave up; see the conditions.
	UpdateJobFailed UpdateJobPhase = "Failed"
)

// Finished reports whether the phase is terminal.
func (p UpdateJobPhase) Finished() bool {
	return p == UpdateJobSucceeded || p == UpdateJobNoChange || p == UpdateJobFailed
}

// UpdateJobStatus is the observed state of an UpdateJob.
type UpdateJobStatus struct {
	// Phase of the job.
	// +optional
	Phase UpdateJobPhase `json:"phase,omitempty"`

	// Attempts counts the runs started, including the current one.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// StartTime is when the first attempt started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the job finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Runner identifies the replica that claimed the job.
	// +optional
	Runner string `json:"runner,omitempty"`

	// HeartbeatTime is renewed by the runner while it works; a stale
	// heartbeat lets another replica reclaim the job.
	// +optional
	HeartbeatTime *metav1.Time `json:"heartbeatTime,omitempty"`

	// CheckoutRevision is the revision the update started from, as
	// <branch>@sha1:<hash>.
	// +optional
	CheckoutRevision string `json:"checkoutRevision,omitempty"`

	// PushedCommit is the hash of the commit pushed.
	// +optional
	PushedCommit string `json:"pushedCommit,omitempty"`

	// PushingCommit is the commit an attempt was about to push, written
	// before the push. A runner killed after its push reached the server
	// but before it recorded the outcome leaves it here; the next attempt
	// finds it on the branch and records the job Succeeded with it,
	// instead of pushing the change again or calling it NoChange.
	// +optional
	PushingCommit string `json:"pushingCommit,omitempty"`

	// Carries are the UIDs of the other UpdateJobs whose changes
	// pushingCommit carries, when this job led a group whose commit
	// carries its own change too: written with pushingCommit, before the
	// push, in place of a write to each of them. A member whose runner
	// was killed after the push finds the commit here. For a batch
	// (spec.members), the UIDs of the automations whose updates
	// pushingCommit carries, the job's own automation among them: the
	// next attempt takes only those as landed.
	// +optional
	Carries []types.UID `json:"carries,omitempty"`

	// PushedRefs are the remote refs updated.
	// +optional
	PushedRefs []string `json:"pushedRefs,omitempty"`

	// Result lists what the update changed, and the markers it found.
	// +optional
	Result *UpdateResult `json:"result,omitempty"`

	// PullRequest is the request the job opened, updated or closed, with
	// spec.push.pullRequest.
	// +optional
	PullRequest *meta.PullRequestStatus `json:"pullRequest,omitempty"`

	// Container is the Pod and container of the last container-mode run.
	// +optional
	Container *ContainerStatus `json:"container,omitempty"`

	// Conditions hold Ready, Reconciling and Stalled.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the last generation reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Members are the outcomes of spec.members, by UID, written with the
	// job's own outcome; atomic, as spec.members is.
	// +kubebuilder:validation:MaxItems=500
	// +listType=atomic
	// +optional
	Members []MemberStatus `json:"members,omitempty"`
}

// Bounds of the marker summary in an UpdateJob's status.result: the
// counts stay exact, the lists are cut.
const (
	// MaxMarkerPolicies is how many policies result.markers lists.
	MaxMarkerPolicies = 100
	// MaxDiscovered is how many images result.discovered lists.
	MaxDiscovered = 500
)

// UpdateResult lists the changes an update made: files, the objects in them,
// and the changes in each object (Flux's ResultV2, as lists); and the
// markers it found, whether or not it changed their values, so that a value
// left alone can be told apart from a value nothing marks.
type UpdateResult struct {
	// Files changed, in walk order.
	// +optional
	Files []meta.FileResult `json:"files,omitempty"`

	// Markers are the policies the markers under the update path name, one
	// entry each: policies the job has no setter for first, then by policy;
	// at most 100 entries.
	// +optional
	Markers []PolicyMarkers `json:"markers,omitempty"`

	// OmittedMarkerPolicies is how many more policies markers name than
	// markers lists.
	// +optional
	OmittedMarkerPolicies int `json:"omittedMarkerPolicies,omitempty"`

	// UnmarkedPolicies are the policies of spec.update.setters that no
	// marker names: the job cannot apply them anywhere.
	// +optional
	UnmarkedPolicies []string `json:"unmarkedPolicies,omitempty"`

	// Discovered are the images the job found with spec.update.discover,
	// by name; at most 500.
	// +kubebuilder:validation:MaxItems=500
	// +optional
	Discovered []meta.DiscoveredImage `json:"discovered,omitempty"`

	// OmittedDiscovered is how many more images were found than
	// Discovered lists.
	// +optional
	OmittedDiscovered int `json:"omittedDiscovered,omitempty"`

	// DiscoverSkipped is how many references discovery did not automate
	// as written (no tag, latest, templates, opted out); tk-image discover
	// lists them with the reasons.
	// +optional
	DiscoverSkipped int `json:"discoverSkipped,omitempty"`

	// Holds are the marked values the job left as a person set them
	// (spec.update.holds), by path and line; at most 100.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Holds []Hold `json:"holds,omitempty"`
}

// PolicyMarkers says where the markers naming one policy are.
type PolicyMarkers struct {
	// Policy is NAMESPACE:NAME, as the markers write it.
	Policy string `json:"policy"`
	// Count is the number of markers naming the policy.
	Count int `json:"count"`
	// Files are up to three of the files holding them, relative to the
	// update path, in path order.
	// +optional
	Files []string `json:"files,omitempty"`
	// Lines are, for each of Files, the line of its first marker naming
	// the policy, from 1 (0 where not known).
	// +optional
	Lines []int `json:"lines,omitempty"`
	// Unknown is set when the job has no setter for the policy: its
	// markers were left as they were.
	// +optional
	Unknown bool `json:"unknown,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=uj,categories=image-toolkit
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.status.attempts`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.pushedCommit`
// +kubebuilder:printcolumn:name="Pull request",type=string,JSONPath=`.status.pullRequest.url`,priority=1
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// UpdateJob is a one-off update of a git repository.
type UpdateJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
	// +required
	Spec UpdateJobSpec `json:"spec"`

	// +optional
	Status UpdateJobStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *UpdateJob) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions.
func (in *UpdateJob) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// +kubebuilder:object:root=true

// UpdateJobList is a list of UpdateJobs.
type UpdateJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []UpdateJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&UpdateJob{}, &UpdateJobList{})
}

// PolicyKey names an ImagePolicy in a setter, as a marker names it:
// NAMESPACE:NAME.
func PolicyKey(namespace, name string) string { return namespace + ":" + name }

// SplitPolicyKey returns the namespace and name a PolicyKey holds.
func SplitPolicyKey(key string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(key, ":")
	return namespace, name, ok && namespace != "" && name != ""
}
