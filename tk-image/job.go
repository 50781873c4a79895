package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/tk-image/internal/explain"
)

// jobFlags describe an UpdateJob: the git flags, the path and the values.
type jobFlags struct {
	gitFlags
	path     string
	set      []string
	backoff  int32
	ttl      time.Duration
	deadline time.Duration
	// container mode
	image            string
	command, cmdArgs []string
	env              []string
	timeout          time.Duration
}

func (j *jobFlags) add(fl *pflag.FlagSet) {
	j.gitFlags.add(fl, true)
	fl.StringVar(&j.path, "path", "", "directory in the repository to update (default: the root)")
	fl.StringArrayVar(&j.set, "set", nil, "a policy value NAMESPACE:NAME=IMAGE:TAG[@DIGEST] that markers naming NAMESPACE:NAME get (repeatable)")
	fl.Int32Var(&j.backoff, "backoff-limit", -1, "retries after a failed attempt (default 3)")
	fl.DurationVar(&j.ttl, "ttl", 0, "delete the job this long after it finished (default: keep it)")
	fl.DurationVar(&j.deadline, "active-deadline", 0, "bound on the job's run time across attempts (default: none)")
	fl.StringVar(&j.image, "container-image", "", "run this image on the checkout of --path instead of the setters, and commit what it changed (container mode; no --set)")
	fl.StringArrayVar(&j.command, "container-command", nil, "the container's command, one word per flag (default: the image's entrypoint)")
	fl.StringArrayVar(&j.cmdArgs, "container-arg", nil, "an argument of the container (repeatable)")
	fl.StringArrayVar(&j.env, "container-env", nil, "an environment variable KEY=VALUE of the container (repeatable)")
	fl.DurationVar(&j.timeout, "container-timeout", 0, "bound on each run of the container's pod (default 10m)")
}

// container is spec.update.container from the --container-* flags, nil
// without --container-image.
func (j *jobFlags) container() (*updatev1.UpdateContainer, error) {
	if j.image == "" {
		if len(j.command)+len(j.cmdArgs)+len(j.env) > 0 || j.timeout != 0 {
			return nil, usageError{errors.New("--container-command, --container-arg, --container-env and --container-timeout need --container-image")}
		}
		return nil, nil
	}
	if len(j.set) > 0 {
		return nil, usageError{errors.New("--container-image runs instead of the setters: give it or --set, not both")}
	}
	c := &updatev1.UpdateContainer{Image: j.image, Command: j.command, Args: j.cmdArgs}
	for _, kv := range j.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--container-env %q is not KEY=VALUE", kv)}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	if j.timeout > 0 {
		c.Timeout = &metav1.Duration{Duration: j.timeout}
	}
	return c, nil
}

// spec builds the UpdateJob spec; what the API server checks (URL scheme,
// tag syntax, ...) is left to it, so its message is the one users see.
func (j *jobFlags) spec() (updatev1.UpdateJobSpec, error) {
	var spec updatev1.UpdateJobSpec
	if j.url == "" {
		return spec, usageError{errors.New("give --url (or --from-automation)")}
	}
	container, err := j.container()
	if err != nil {
		return spec, err
	}
	if len(j.set) == 0 && container == nil {
		return spec, usageError{errors.New("give at least one --set NAMESPACE:NAME=IMAGE:TAG, or --container-image")}
	}
	checkout := j.checkout()
	if checkout == nil {
		return spec, usageError{errors.New("give --branch, or one of --checkout-tag, --checkout-semver, --checkout-ref, --checkout-commit")}
	}
	var setters []updatev1.PolicySetter
	if container == nil {
		if setters, err = parseSetters(j.set); err != nil {
			return spec, err
		}
	}
	spec.Repository = j.repository()
	spec.Checkout = *checkout
	spec.Update = updatev1.UpdateSpec{Path: j.path, Setters: setters, Container: container}
	if spec.Commit, err = j.commitSpec(); err != nil {
		return spec, err
	}
	if spec.Push, err = j.push(); err != nil {
		return spec, err
	}
	if j.backoff >= 0 {
		spec.BackoffLimit = &j.backoff
	}
	if j.ttl > 0 {
		s := int32(j.ttl / time.Second)
		spec.TTLSecondsAfterFinished = &s
	}
	if j.deadline > 0 {
		s := int64(j.deadline / time.Second)
		spec.ActiveDeadlineSeconds = &s
	}
	return spec, nil
}

func newJobCommand(k *kube) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Run ad-hoc UpdateJobs",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newJobRunCommand(k), newJobLogsCommand(k))
	return cmd
}

func newJobRunCommand(k *kube) *cobra.Command {
	var (
		j              jobFlags
		f              createFlags
		fromAutomation string
	)
	cmd := &cobra.Command{
		Use:   "run [NAME] (--url URL --branch BRANCH --set NAMESPACE:NAME=IMAGE:TAG... | --from-automation AUTOMATION)",
		Short: "Update a git repository now, without an automation, and follow the job",
		Long: `Create an UpdateJob and follow it: print its phase changes, then the
pushed commit and what changed (file, object, old -> new value). The
update-job-controller in the cluster does the work, with the credentials
in --secret. Without NAME the job gets a generated name.

With --pull-request (or any --pr-* flag) the job proposes the change as a
pull (merge) request from a head branch of its own instead of pushing to
the branch, and a line says what it did to the request (opened, updated,
unchanged or closed) with its address, head branch and commit.

With --from-automation, ask the automation to run now (a reconcile request)
and follow the UpdateJob it creates; when nothing changed since its last
run it creates none, and that is reported.

Exit status: 0 when the job pushed a commit, proposed it, or found nothing
to change, 1 when it failed or did not finish within --timeout (it keeps
running in the cluster), 2 for bad arguments.`,
		Example: `  tk-image job run --url https://github.com/org/fleet --secret fleet-auth --branch main \
    --path clusters/prod --set apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0
  tk-image job run --url https://github.com/org/fleet --secret fleet-auth --branch main \
    --set apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0 --pull-request --pr-label automated
  tk-image job run --from-automation apps -n flux-system`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if fromAutomation != "" {
				if len(args) > 0 || j.url != "" || len(j.set) > 0 {
					return usageError{errors.New("--from-automation takes no NAME, --url or --set: the automation says what to run")}
				}
				// Asking for a request that the automation would not make
				// could push straight to its branch instead: refuse it.
				if by := j.pr.askedBy(); by != "" {
					return usageError{fmt.Errorf("--from-automation takes no %s: the automation's spec.git.push.pullRequest says whether it proposes a pull request", by)}
				}
				return runAutomation(cmd.Context(), k, fromAutomation, f.waitFlags, out)
			}
			spec, err := j.spec()
			if err != nil {
				return err
			}
			job := &updatev1.UpdateJob{Spec: spec}
			if len(args) == 1 {
				job.Name = args[0]
			} else {
				job.GenerateName = "run-"
			}
			return createJob(cmd.Context(), k, &f, job, out)
		},
	}
	j.add(cmd.Flags())
	j.pr.complete(cmd)
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, "a label KEY=VALUE to set on the job (repeatable)")
	cmd.Flags().StringVar(&fromAutomation, "from-automation", "", "run this ImageUpdateAutomation's job now")
	// A job clones, updates and pushes: longer than a reconcile.
	f.waitFlags.add(cmd.Flags(), true, 10*time.Minute, "the job has finished")
	_ = cmd.RegisterFlagCompletionFunc("from-automation", completeNames(k, "automation", 0))
	return cmd
}

// createJob creates job in the selected namespace and, with --wait,
// follows it to the end; with --export it prints it instead. A job is
// created, never updated: its spec is immutable.
func createJob(ctx context.Context, k *kube, f *createFlags, job *updatev1.UpdateJob, out io.Writer) error {
	lbls, err := f.labelMap()
	if err != nil {
		return err
	}
	job.Labels = lbls
	if f.export {
		return f.writeYAML(k, "job", job, out)
	}
	c, key, err := k.target(job.Name)
	if err != nil {
		return err
	}
	job.Namespace = key.Namespace
	if err := c.Create(ctx, job); err != nil {
		return err
	}
	key.Name = job.Name
	fmt.Fprintf(out, "UpdateJob %s created\n", key)
	if !f.wait {
		return nil
	}
	return followJob(ctx, c, key, "", f.timeout, out)
}

// followJob prints a job's phase changes until it finishes, then its
// outcome; an error when it failed or is still running at the timeout.
// With an automation's UID, the job is followed as that automation's own
// (explain.AsOwnJob): a batch's member sees its own update's outcome.
func followJob(ctx context.Context, c client.Client, key types.NamespacedName, automation types.UID, timeout time.Duration, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	job := &updatev1.UpdateJob{}
	for {
		read := &updatev1.UpdateJob{}
		err := c.Get(ctx, key, read)
		if err == nil {
			job = read
			if automation != "" {
				job = explain.AsOwnJob(read, automation)
			}
			if now := phaseLine(job); now != last {
				fmt.Fprintf(out, "UpdateJob %s: %s\n", key, now)
				last = now
			}
			if job.Status.Phase.Finished() {
				return jobOutcome(job, out)
			}
		} else if apierrors.IsNotFound(err) {
			return fmt.Errorf("UpdateJob %s was deleted before it finished", key)
		}
		select {
		case <-ctx.Done():
			phase := job.Status.Phase
			if phase == "" {
				phase = "not yet claimed by an update-job-controller"
			}
			return fmt.Errorf("UpdateJob %s did not finish within %s (%s); it goes on in the cluster: tk-image get job %s -n %s --watch",
				key, timeout, phase, key.Name, key.Namespace)
		case <-tick.C:
		}
	}
}

// phaseLine says where a job is: its phase, and attempt while running.
func phaseLine(job *updatev1.UpdateJob) string {
	switch job.Status.Phase {
	case "", updatev1.UpdateJobPending:
		// A job no runner has claimed yet has no phase or Pending,
		// depending on whether the controller has seen it: one line.
		return "created, waiting for an update-job-controller"
	case updatev1.UpdateJobRunning:
		limit := int32(3)
		if job.Spec.BackoffLimit != nil {
			limit = *job.Spec.BackoffLimit
		}
		return fmt.Sprintf("Running (attempt %d of %d)", job.Status.Attempts, limit+1)
	}
	return string(job.Status.Phase)
}

// jobOutcome prints a finished job's result; an error when it failed.
func jobOutcome(job *updatev1.UpdateJob, out io.Writer) error {
	st := job.Status
	if st.CheckoutRevision != "" {
		fmt.Fprintf(out, "checked out %s\n", st.CheckoutRevision)
	}
	if st.Phase == updatev1.UpdateJobFailed {
		msg := "no message"
		if c := apimeta.FindStatusCondition(st.Conditions, conditions.ReadyCondition); c != nil {
			msg = c.Reason + ": " + c.Message
		}
		if c := st.Container; c != nil {
			// Where the container's whole log is.
			fmt.Fprintf(out, "container %s of pod %s: tk-image job logs %s -n %s\n", c.ContainerName, c.PodName, job.Name, job.Namespace)
		}
		return fmt.Errorf("UpdateJob %s/%s failed: %s", job.Namespace, job.Name, msg)
	}
	pr := st.PullRequest
	// A request left unchanged still proposes values the base lacks: the
	// files do not hold them, so its own line says why nothing changed.
	if st.Phase == updatev1.UpdateJobNoChange && (pr == nil || pr.Action == meta.PullRequestClosedNow) {
		if job.Spec.Update.Container != nil {
			fmt.Fprintln(out, "no change: the container left the files as they were")
		} else {
			fmt.Fprintln(out, "no change: every marked value already holds its policy's image")
		}
	}

	// A request's job pushes only when its head branch needs a new commit.
	if st.PushedCommit != "" {
		fmt.Fprintf(out, "pushed commit %s to %s\n", st.PushedCommit, strings.Join(st.PushedRefs, ", "))
	}
	if pr != nil {
		var provider, apiURL string
		if p := job.Spec.Push; p != nil && p.PullRequest != nil {
			provider, apiURL = string(p.PullRequest.Provider), p.PullRequest.APIURL
		}
		writePullRequest(out, pr, job.Spec.Repository.URL, provider, apiURL)
	}
	if st.Phase == updatev1.UpdateJobSucceeded && st.Result != nil {
		// The status names files from the update path; print them from
		// the repository's root, as the commit does.
		printFiles(out, (&setters.Result{Files: st.Result.Files}).In(job.Spec.Update.Path).Files)
	}
	return nil
}

// runAutomation asks an automation to run now and follows the job it
// makes. The automation decides what the job is, with the code it always
// runs, so an ad-hoc run is exactly a scheduled one.
func runAutomation(ctx context.Context, k *kube, name string, w waitFlags, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	auto := &imagev1.ImageUpdateAutomation{}
	if err := c.Get(ctx, key, auto); err != nil {
		return err
	}
	var before types.UID
	if auto.Status.LastJob != nil {
		before = auto.Status.LastJob.UID
	}
	kd, _ := kindNamed("automation")
	token, err := requestReconcile(ctx, c, kd, auto, out)
	if err != nil {
		return err
	}

	deadline := time.Now().Add(w.timeout)
	for {
		if err := c.Get(ctx, key, auto); err != nil {
			return err
		}
		if auto.Status.LastHandledReconcileAt == token {
			job, err := explain.InFlightJob(ctx, c, auto)
			if err != nil {
				return err
			}
			if job == nil && auto.Status.LastJob != nil && auto.Status.LastJob.UID != before {
				job = &updatev1.UpdateJob{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: auto.Status.LastJob.Name}, job); err != nil {
					return err
				}
			}
			if job != nil {
				return followJob(ctx, c, client.ObjectKeyFromObject(job), auto.UID, time.Until(deadline), out)
			}
			if !apimeta.IsStatusConditionTrue(auto.Status.Conditions, conditions.ReconcilingCondition) {
				ready := apimeta.FindStatusCondition(auto.Status.Conditions, conditions.ReadyCondition)
				if ready != nil && ready.Status == metav1.ConditionTrue {
					fmt.Fprintf(out, "no job: %s\n", ready.Message)
					return nil
				}
				if ready != nil {
					return fmt.Errorf("ImageUpdateAutomation %s is not ready: %s: %s", key, ready.Reason, ready.Message)
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ImageUpdateAutomation %s did not act on the request within %s", key, w.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
