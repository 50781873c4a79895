// Package conditions sets and reads the status conditions kstatus
// understands: Ready, Reconciling and Stalled. An object is in progress while
// Reconciling is True, has failed for good while Stalled is True, and is
// current when Ready is True and neither of the others is present.
//
// A reconcile that fails says why with a *Failure: a reason, Stalled or
// retried, when to look again, and the secrets its message must not show.
// Domain packages return their own typed errors: one that is Classified
// says what it means for the object (its reason, whether it stalls), and
// the skeleton reads it as it is; any other, a phase turns into a Failure
// where it calls the package, and returns it. It does not mark
// the failure itself: pkg/runtime/reconcile, the skeleton every reconciler
// is built on, takes every error a phase returns the one way, AsFailure
// then Record (redacted), then the kind's OnFailure for events and
// metrics. Record is the one function that writes a failure; a phase calls
// it directly only to record a failure that is not the reconcile's but an
// outcome the object reports (an UpdateJob's failed attempt, an
// automation's failed job), and the reconcile goes on. MarkFailed and
// MarkStalled are what Record writes; outside this package only tests
// call them, to stage an object's state. MarkReady and MarkReconciling
// are the phases' own: success and progress are theirs to say.
package conditions

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types.
const (
	// ReadyCondition is True when the object's last reconciliation succeeded.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the controller works toward the spec.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when the controller cannot make progress
	// without a change to the object or its dependencies.
	StalledCondition = "Stalled"
)

// Reasons shared by all kinds; each API package adds its own.
const (
	// SucceededReason: the reconciliation succeeded.
	SucceededReason = "Succeeded"
	// ProgressingReason: the reconciliation is under way.
	ProgressingReason = "Progressing"
	// FailedReason: the reconciliation failed and will be retried.
	FailedReason = "Failed"
	// InvalidSpecReason: the spec cannot be acted on as written.
	InvalidSpecReason = "InvalidSpec"
	// DependencyNotReadyReason: an object this one needs is not ready yet.
	DependencyNotReadyReason = "DependencyNotReady"
	// AccessDeniedReason: a cross-namespace reference is not allowed.
	AccessDeniedReason = "AccessDenied"
	// SecretNotFoundReason: a Secret the object refers to does not exist.
	SecretNotFoundReason = "SecretNotFound"
	// AuthenticationFailedReason: a registry or git server refused the
	// credentials, or a host key or TLS certificate did not verify.
	AuthenticationFailedReason = "AuthenticationFailed"
	// GitOperationFailedReason: talking to a git server failed (listing,
	// fetching or pushing); it is retried.
	GitOperationFailedReason = "GitOperationFailed"
	// ProviderMismatchReason: the object's cloud provider does not serve
	// its registry (aws for ghcr.io, say), or takes no such repository.
	ProviderMismatchReason = "ProviderMismatch"
	// WorkloadIdentityNotEnabledReason: the object names a ServiceAccount
	// whose cloud identity to use, and the controller does not run with
	// --object-level-workload-identity.
	WorkloadIdentityNotEnabledReason = "WorkloadIdentityNotEnabled"
	// StorageFullReason: writing the controller's own data (the tag store,
	// the git mirror cache or a job's work tree) failed because its file
	// system is full (or over quota); retried, and it succeeds once space
	// is freed.
	StorageFullReason = "StorageFull"
)

// Getter is an object with status conditions.
type Getter interface {
	GetGeneration() int64
	GetConditions() []metav1.Condition
}

// Setter is an object whose status conditions can be set.
type Setter interface {
	Getter
	SetConditions([]metav1.Condition)
}

// Get returns the condition of the given type, or nil.
func Get(obj Getter, t string) *metav1.Condition {
	return apimeta.FindStatusCondition(obj.GetConditions(), t)
}

// IsTrue reports whether the condition of the given type is True.
func IsTrue(obj Getter, t string) bool {
	return apimeta.IsStatusConditionTrue(obj.GetConditions(), t)
}

// IsFalse reports whether the condition of the given type is False.
func IsFalse(obj Getter, t string) bool {
	return apimeta.IsStatusConditionFalse(obj.GetConditions(), t)
}

// IsReady reports whether Ready is True and reflects the current generation.
func IsReady(obj Getter) bool {
	c := Get(obj, ReadyCondition)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.GetGeneration()
}

// Set sets a condition, keeping its transition time unless the status
// changes. The message is formatted with args.
func Set(obj Setter, t string, status metav1.ConditionStatus, reason, msg string, args ...any) {
	conds := obj.GetConditions()
	apimeta.SetStatusCondition(&conds, metav1.Condition{
		Type:               t,
		Status:             status,
		Reason:             reason,
		Message:            format(msg, args),
		ObservedGeneration: obj.GetGeneration(),
	})
	obj.SetConditions(conds)
}

// Delete removes the condition of the given type.
func Delete(obj Setter, t string) {
	conds := obj.GetConditions()
	if apimeta.RemoveStatusCondition(&conds, t) {
		obj.SetConditions(conds)
	}
}

// MarkReconciling records that work is under way: Reconciling=True and
// Ready=Unknown, and clears Stalled.
func MarkReconciling(obj Setter, reason, msg string, args ...any) {
	Set(obj, ReconcilingCondition, metav1.ConditionTrue, reason, msg, args...)
	Set(obj, ReadyCondition, metav1.ConditionUnknown, reason, msg, args...)
	Delete(obj, StalledCondition)
}

// MarkReady records success: Ready=True, and clears Reconciling and Stalled.
func MarkReady(obj Setter, reason, msg string, args ...any) {
	Set(obj, ReadyCondition, metav1.ConditionTrue, reason, msg, args...)
	Delete(obj, ReconcilingCondition)
	Delete(obj, StalledCondition)
}

// MarkFailed records a failure that will be retried: Ready=False, and clears
// Reconciling and Stalled.
func MarkFailed(obj Setter, reason, msg string, args ...any) {
	Set(obj, ReadyCondition, metav1.ConditionFalse, reason, msg, args...)
	Delete(obj, ReconcilingCondition)
	Delete(obj, StalledCondition)
}

// MarkStalled records a failure that retrying cannot fix: Stalled=True and
// Ready=False with the same reason, and clears Reconciling.
func MarkStalled(obj Setter, reason, msg string, args ...any) {
	Set(obj, StalledCondition, metav1.ConditionTrue, reason, msg, args...)
	Set(obj, ReadyCondition, metav1.ConditionFalse, reason, msg, args...)
	Delete(obj, ReconcilingCondition)
}

func format(msg string, args []any) string {
	if len(args) == 0 {
		return msg
	}
	return fmt.Sprintf(msg, args...)
}
