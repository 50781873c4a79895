package controller

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/gitsource"
)

// What an automation's UpdateJob is: its spec, made from the automation
// and its source, its labels and annotations, and its name, which hashes
// the job's inputs (spec, branch head, generation) so that a run that
// would make the same job again finds it instead (an idempotent create).
// The push target a spec names is what turn-taking (turns.go) compares.

// Labels and annotations on the UpdateJobs an automation creates.
const (
	// AutomationLabel names the automation, for kubectl -l (when the name
	// fits in a label value).
	AutomationLabel = "image.toolkit.dev/automation"
	// InputsAnnotation is the hash of what the job was made from: its spec,
	// the branch head and the automation's generation.
	InputsAnnotation = "image.toolkit.dev/inputs"
	// GenerationAnnotation is the automation's generation the job applies.
	GenerationAnnotation = "image.toolkit.dev/automation-generation"
	// RunAnnotation numbers an automation's jobs in the order they were
	// made (creation times have whole seconds, too coarse to order them).
	RunAnnotation = "image.toolkit.dev/run"
)

// jobOwnerIndex indexes UpdateJobs by the UIDs of the
// ImageUpdateAutomations whose updates they carry: the one that controls
// a job, and a batch's members.
const jobOwnerIndex = ".metadata.ownerReferences.automation"

func jobAutomations(o client.Object) []string {
	j, ok := o.(*updatev1.UpdateJob)
	if !ok || ownerUID(j) == "" {
		return nil
	}
	var out []string
	for _, uid := range j.Automations() {
		out = append(out, string(uid))
	}
	return out
}

// ownerUID returns the UID of the ImageUpdateAutomation controlling job.
func ownerUID(job client.Object) string {
	ref := metav1.GetControllerOf(job)
	if ref == nil || ref.Kind != imagev1.ImageUpdateAutomationKind || !strings.HasPrefix(ref.APIVersion, imagev1.GroupVersion.Group+"/") {
		return ""
	}
	return string(ref.UID)
}

// jobSpec is the UpdateJob for one run of an automation of namespace,
// looking for holds (and overriding the released ones) as holds says.
func jobSpec(namespace string, a *imagev1.ImageUpdateAutomationSpec, src gitsource.Source, setters []updatev1.PolicySetter, holds *updatev1.HoldSpec) updatev1.UpdateJobSpec {
	spec := updatev1.UpdateJobSpec{
		Repository: *src.Repository.DeepCopy(),
		Checkout:   updatev1.GitCheckoutSpec{Reference: src.Ref},
		Update:     updatev1.UpdateSpec{Setters: setters, Holds: holds},
		Commit:     *a.GitSpec.Commit.DeepCopy(),
		Push:       a.GitSpec.Push.DeepCopy(),
	}
	spec.Update.Path = src.Path
	if a.Update != nil && a.Update.Path != "" {
		spec.Update.Path = a.Update.Path
	}
	spec.Update.ArgoCD = argoCDOverrides(a, src, setters)
	if a.Update != nil {
		spec.Update.Files = a.Update.Files
		for _, c := range a.Update.Charts {
			chart := updatev1.ChartUpdate{Policy: updatev1.PolicyKey(namespace, c.Policy), ArgoCDChart: c.ArgoCDChart}
			chart.Namespace = cmp.Or(c.Namespace, namespace)
			spec.Update.Charts = append(spec.Update.Charts, chart)
		}
	}
	if d := a.Discover; d != nil {
		spec.Update.Discover = d.DiscoverSpec.DeepCopy()
	}
	if spec.Update.Setters == nil {
		spec.Update.Setters = []updatev1.PolicySetter{}
	}
	return spec
}

// inputsHash identifies a run by what its job is made from.
func inputsHash(spec updatev1.UpdateJobSpec, head string, generation int64) string {
	b, err := json.Marshal(struct {
		Spec       updatev1.UpdateJobSpec `json:"spec"`
		Head       string                 `json:"head"`
		Generation int64                  `json:"generation"`
	}{spec, head, generation})
	if err != nil {
		panic(err) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// jobName is <automation>-<10 hex digits>, from the inputs and the number
// of the attempt with these inputs, so that the same decision always makes
// the same name.
func jobName(automation, inputs string, attempt int) string {
	sum := sha256.Sum256([]byte(inputs + "/" + strconv.Itoa(attempt)))
	suffix := hex.EncodeToString(sum[:])[:10]
	prefix := automation
	if max := validation.DNS1123SubdomainMaxLength - len(suffix) - 1; len(prefix) > max {
		prefix = strings.TrimRight(prefix[:max], "-.")
	}
	return prefix + "-" + suffix
}

// pushTarget is where a job's commit lands: its repository, by
// gitsource.RepositoryKey (any spelling of the URL), and branch. A job
// proposing a pull request writes its own head branch, which no other
// automation's job writes: it has no shared target.
func pushTarget(spec *updatev1.UpdateJobSpec) (string, bool) {
	branch := spec.Checkout.Reference.Branch
	if p := spec.Push; p != nil {
		if p.PullRequest != nil {
			return "", false
		}
		if p.Branch != "" {
			branch = p.Branch
		}
	}
	repo, ok := gitsource.RepositoryKey(spec.Repository.URL)
	if !ok {
		repo = strings.TrimSpace(spec.Repository.URL)
	}
	return repo + "@" + branch, true
}

// sameTarget reports whether two jobs push to the same branch of the same
// repository: only such jobs can set a file back and forth, so only
// they take turns. Automations sharing a policy across repositories or
// branches (one policy, many clusters) run at once.
func sameTarget(a, b *updatev1.UpdateJobSpec) bool {
	ta, ok := pushTarget(a)
	if !ok {
		return false
	}
	tb, ok := pushTarget(b)
	return ok && ta == tb
}
