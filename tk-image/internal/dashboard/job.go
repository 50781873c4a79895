package dashboard

import (
	"net/http"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// jobBody is an UpdateJob's page: what it set, how its attempts went, the
// commit or pull request it made or why it refused, each automation it
// carried and its events (the lines the job recorded).
type jobBody struct {
	Job    *updatev1.UpdateJob
	Phase  updatev1.UpdateJobPhase
	Ready  *metav1.Condition
	Why    *Diagnosis
	Commit string
	// CommitURL is the commit's page on the forge, when it has one.
	CommitURL string
	Duration  string
	// Automations are those the job carries, the owner first, each with
	// its own outcome for a batch.
	Automations []jobAutomation
	Setters     []updatev1.PolicySetter
	Changes     []jobChange
	Events      []EventRow
	EventsErr   string
}

type jobAutomation struct {
	Name    string
	Phase   updatev1.UpdateJobPhase
	Message string
}

// jobChange is one value a job's commit changed.
type jobChange struct {
	Path, Object, Setter, From, To string
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	j := &updatev1.UpdateJob{}
	key, ok := s.read(ctx, w, r, j)
	if !ok {
		return
	}
	b := &jobBody{Job: j, Phase: orPhase(j.Status.Phase), Commit: j.Status.PushedCommit, Setters: j.Spec.Update.Setters,
		Ready: apimeta.FindStatusCondition(j.Status.Conditions, conditions.ReadyCondition)}
	if b.Phase == updatev1.UpdateJobFailed {
		b.Why = diagnose(b.Ready, subject{}, s.opts.Now())
	}
	if st, end := j.Status.StartTime, j.Status.CompletionTime; st != nil && end != nil {
		b.Duration = end.Sub(st.Time).Round(time.Second).String()
	}
	owner := &imagev1.ImageUpdateAutomation{}
	for _, uid := range j.Automations() {
		v, _ := j.View(uid)
		if v == nil {
			continue
		}
		ja := jobAutomation{Name: automationName(j, uid), Phase: orPhase(v.Status.Phase)}
		if c := apimeta.FindStatusCondition(v.Status.Conditions, conditions.ReadyCondition); c != nil {
			ja.Message = c.Message
		}
		b.Automations = append(b.Automations, ja)
	}
	if len(b.Automations) > 0 {
		_ = s.get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: b.Automations[0].Name}, owner)
	}
	if b.Commit != "" {
		b.CommitURL = forge.CommitURL(withoutUser(j.Spec.Repository.URL), forgeOf(owner), b.Commit)
	}
	if res := j.Status.Result; res != nil {
		// The status names files from the update path; show them from
		// the repository's root, as the commit does.
		b.Changes = changesOf((&setters.Result{Files: res.Files}).In(j.Spec.Update.Path).Files)
	}
	b.Events, b.EventsErr = s.eventsOf(ctx, j)
	s.render(w, r, "job", http.StatusOK, s.view(r, "UpdateJob "+key.String(), key.Namespace, b))
}

// automationName names the automation of uid a job carries: its owner
// or a batch member.
func automationName(j *updatev1.UpdateJob, uid types.UID) string {
	for _, o := range j.OwnerReferences {
		if o.UID == uid && o.Kind == imagev1.ImageUpdateAutomationKind {
			return o.Name
		}
	}
	for _, m := range j.Spec.Members {
		if m.UID == uid {
			return m.Automation
		}
	}
	return ""
}

// changesOf lists the values a job's files changed.
func changesOf(files []meta.FileResult) []jobChange {
	var out []jobChange
	for _, f := range files {
		for _, o := range f.Objects {
			for _, c := range o.Changes {
				out = append(out, jobChange{Path: f.Path, Object: o.ObjectID.String(), Setter: c.Setter, From: c.OldValue, To: c.NewValue})
			}
		}
		if len(f.Objects) == 0 {
			out = append(out, jobChange{Path: f.Path, Object: string(f.Operation)})
		}
	}
	return out
}
