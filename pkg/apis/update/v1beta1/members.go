package v1beta1

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A batch is one UpdateJob carrying the updates of many automations of one
// branch: its own (spec.update, for the automation that controls it) and
// its members'. One object, one claim and one outcome write for a whole
// monorepo's tag, where a job per automation cost the API server a create
// and three status writes each. Every reader that knows one automation's
// job (the automation's record of it, tk-image explain, the dashboard)
// reads View: the batch as if it were that automation's own job. So the
// batch is a way of storing jobs, not a second kind of job.

// MaxMembers bounds the members of a batch: an object stays well under the
// API server's size limit with each member's update and result.
const MaxMembers = 500

// UpdateJobMember is one automation's update in a batch.
type UpdateJobMember struct {
	// Automation is the ImageUpdateAutomation's name, in the job's
	// namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Automation string `json:"automation"`

	// UID of the automation.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +required
	UID types.UID `json:"uid"`

	// Annotations are those a job of the automation's own would carry
	// (what it was made from, its run number).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// Update is what the member changes, as spec.update.
	// +required
	Update UpdateSpec `json:"update"`

	// MessageTemplate and MessageTemplateValues are the automation's,
	// as spec.commit's: the commit message has each member's part.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	MessageTemplate string `json:"messageTemplate,omitempty"`
	// +optional
	MessageTemplateValues map[string]string `json:"messageTemplateValues,omitempty"`
}

// MemberStatus is the outcome of one member of a batch.
type MemberStatus struct {
	// UID of the member's automation.
	UID types.UID `json:"uid"`

	// Automation is the member's automation's name.
	Automation string `json:"automation"`

	// Phase is the member's outcome: Succeeded when the job's commit
	// carries its change, NoChange or Failed.
	Phase UpdateJobPhase `json:"phase"`

	// PushedCommit is the job's commit, when it carries the member's
	// change.
	// +optional
	PushedCommit string `json:"pushedCommit,omitempty"`

	// Result is what the member's update changed and found.
	// +optional
	Result *UpdateResult `json:"result,omitempty"`

	// Reason and Message are the member's Ready condition's.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// IsBatch reports whether the job carries members.
func (in *UpdateJob) IsBatch() bool { return len(in.Spec.Members) > 0 }

// Automations are the UIDs of the automations whose updates the job
// carries: its controller's, then its members'.
func (in *UpdateJob) Automations() []types.UID {
	var out []types.UID
	if ref := metav1.GetControllerOf(in); ref != nil {
		out = append(out, ref.UID)
	}
	for _, m := range in.Spec.Members {
		out = append(out, m.UID)
	}
	return out
}

// View is the job as the automation uid's own: for its controller, the job
// without its members; for a member, the job with the member's update,
// message, annotations and outcome, controlled by the member's
// automation. False when the job carries nothing of uid's.
func (in *UpdateJob) View(uid types.UID) (*UpdateJob, bool) {
	ctl := metav1.GetControllerOf(in)
	if ctl != nil && ctl.UID == uid {
		return in.withoutMembers().DeepCopy(), true
	}
	for i := range in.Spec.Members {
		if m := &in.Spec.Members[i]; m.UID == uid {
			return in.memberView(ctl, m), true
		}
	}
	return nil, false
}

// ViewsOf are the jobs that carry the update of the automation uid, each
// as its own (View): those it controls, and the batches it is a member of.
func ViewsOf(uid types.UID, jobs []UpdateJob) []UpdateJob {
	var out []UpdateJob
	for i := range jobs {
		if v, ok := jobs[i].View(uid); ok {
			out = append(out, *v)
		}
	}
	return out
}

// Views are the job as each automation's own: its controller's first.
func (in *UpdateJob) Views() []UpdateJob {
	var out []UpdateJob
	for _, uid := range in.Automations() {
		if v, ok := in.View(uid); ok {
			out = append(out, *v)
		}
	}
	return out
}

// withoutMembers is a shallow copy of the job without its members, so
// that a view copies one automation's part of a batch, not all of it.
func (in *UpdateJob) withoutMembers() *UpdateJob {
	out := *in
	out.Spec.Members, out.Status.Members = nil, nil
	return &out
}

func (in *UpdateJob) memberView(ctl *metav1.OwnerReference, m *UpdateJobMember) *UpdateJob {
	base := in.withoutMembers()
	// The member's view has its own controller in place of the batch's
	// owners: copying them, one per member, for each member's view made
	// the views of a batch of 500 cost 250,000 copies.
	base.OwnerReferences = nil
	v := &UpdateJob{TypeMeta: in.TypeMeta}
	base.ObjectMeta.DeepCopyInto(&v.ObjectMeta)
	if v.Annotations == nil && len(m.Annotations) > 0 {
		v.Annotations = map[string]string{}
	}
	maps.Copy(v.Annotations, m.Annotations)
	if ctl != nil {
		yes := true
		v.OwnerReferences = []metav1.OwnerReference{{APIVersion: ctl.APIVersion, Kind: ctl.Kind,
			Name: m.Automation, UID: m.UID, Controller: &yes}}
	}
	base.Spec.Update = UpdateSpec{}
	base.Spec.DeepCopyInto(&v.Spec)
	m.Update.DeepCopyInto(&v.Spec.Update)
	v.Spec.Commit.MessageTemplate = m.MessageTemplate
	v.Spec.Commit.MessageTemplateValues = maps.Clone(m.MessageTemplateValues)
	// What the job did for the leader alone is not the member's.
	base.Status.PushedCommit, base.Status.PushedRefs, base.Status.Result, base.Status.Carries = "", nil, nil, nil
	base.Status.DeepCopyInto(&v.Status)
	var st *MemberStatus
	for i := range in.Status.Members {
		if in.Status.Members[i].UID == m.UID {
			st = &in.Status.Members[i]
		}
	}
	switch {
	case st != nil:
		v.Status.Phase = st.Phase
		v.Status.PushedCommit = st.PushedCommit
		if st.PushedCommit != "" && st.PushedCommit == in.Status.PushedCommit {
			v.Status.PushedRefs = append([]string(nil), in.Status.PushedRefs...)
		}
		v.Status.Result = st.Result.DeepCopy()
		if st.Reason != "" {
			ready := metav1.ConditionTrue
			if st.Phase == UpdateJobFailed {
				ready = metav1.ConditionFalse
			}
			at := metav1.Now()
			if in.Status.CompletionTime != nil {
				at = *in.Status.CompletionTime
			}
			setReady(&v.Status.Conditions, metav1.Condition{Type: "Ready", Status: ready,
				Reason: st.Reason, Message: st.Message, LastTransitionTime: at, ObservedGeneration: in.Generation})
		}
	case in.Status.Phase.Finished():
		// A batch that ended before it ran any update (its spec, its
		// credentials) ended each member the same way.
		v.Status.Phase = UpdateJobFailed
	}
	return v
}

// SetMember records the outcome of a member's view (View) in the job's
// status.members.
func (in *UpdateJob) SetMember(view *UpdateJob) {
	ctl := metav1.GetControllerOf(view)
	if ctl == nil {
		return
	}
	st := MemberStatus{UID: ctl.UID, Automation: ctl.Name, Phase: view.Status.Phase,
		PushedCommit: view.Status.PushedCommit, Result: view.Status.Result.DeepCopy()}
	for _, c := range view.Status.Conditions {
		if c.Type == "Ready" {
			st.Reason, st.Message = c.Reason, c.Message
		}
	}
	for i := range in.Status.Members {
		if in.Status.Members[i].UID == st.UID {
			in.Status.Members[i] = st
			return
		}
	}
	in.Status.Members = append(in.Status.Members, st)
}

// setReady replaces the Ready condition (the API packages import no more
// than apimachinery's types: tests/deps).
func setReady(conds *[]metav1.Condition, c metav1.Condition) {
	for i := range *conds {
		if (*conds)[i].Type == c.Type {
			(*conds)[i] = c
			return
		}
	}
	*conds = append(*conds, c)
}
