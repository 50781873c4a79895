package controller

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/update-job-controller/internal/transfer"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;create;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// Names in a container-mode job's Pod.
const (
	// UserContainer is the container running spec.update.container.
	UserContainer  = updatev1.UserContainerName
	fetchContainer = "fetch"
	uploadStep     = "upload"

	workspaceDir = "/workspace"
	tokenDir     = "/var/run/secrets/update.image.toolkit.dev"
	// The kubelet's minimum for a projected token; it rotates it at 80%.
	tokenExpiry = 600

	// stepUser runs the Pod, as the controller image does (distroless
	// nonroot); the user's container runs as the same user so that the
	// files the steps write are its own.
	stepUser = 65532

	// LabelJobName and LabelJobUID name the job of a Pod.
	LabelJobName = updatev1.PodJobNameLabel
	LabelJobUID  = updatev1.PodJobUIDLabel
	// LabelAttempt and LabelRound say which run of the job a Pod is.
	LabelAttempt = updatev1.PodAttemptLabel
	LabelRound   = updatev1.PodRoundLabel

	defaultContainerTimeout = 10 * time.Minute
	// podGrace is how long past its timeout a Pod may take before the
	// controller gives up on it itself (the kubelet enforces
	// activeDeadlineSeconds; this covers a Pod no kubelet runs).
	podGrace = 30 * time.Second
	// messageTail caps the termination message kept in a condition.
	messageTail = 1024
)

// Containers runs the container of container-mode jobs in Pods, and
// exchanges the checkout and the result with them through Transfer.
type Containers struct {
	Client    client.Client
	APIReader client.Reader
	Transfer  *transfer.Server
	// Address is HOST:PORT, how Pods reach Transfer.
	Address string
	// StepImage runs the fetch and upload steps: the controller's image.
	StepImage string
	// MaxBytes caps each transfer; 0 means transfer.DefaultMaxBytes.
	MaxBytes int64
	// Poll is how often a running Pod is looked at; 1 s when zero. A
	// watch would need list and watch of every Pod in the cluster (or a
	// cache of them) for a handful of running jobs.
	Poll time.Duration
	// Grace is how long past its timeout a Pod may run before the
	// controller deletes it and fails the round itself; podGrace when
	// zero.
	Grace time.Duration
}

// hook is the runner's Container hook for one attempt of job. status is
// told where the container runs, and how it ended.
func (c *Containers) hook(job *updatev1.UpdateJob, status func(context.Context, *updatev1.ContainerStatus)) func(ctx context.Context, round int, checkout, result string) error {
	return func(ctx context.Context, round int, checkout, result string) error {
		return c.run(ctx, job, round, checkout, result, status)
	}
}

func containerTimeout(spec *updatev1.UpdateContainer) time.Duration {
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		return spec.Timeout.Duration
	}
	return defaultContainerTimeout
}

// run creates the Pod of one round, waits for its upload and returns the
// round's failure, if any, as a *conditions.Failure.
func (c *Containers) run(ctx context.Context, job *updatev1.UpdateJob, round int, checkout, result string,
	status func(context.Context, *updatev1.ContainerStatus)) error {
	pod := c.PodFor(job, round)
	if err := c.Client.Create(ctx, pod); err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			// Admission (a quota, a policy) or the spec refused it.
			return conditions.Stall(updatev1.ContainerFailedReason, fmt.Errorf("creating the pod: %w", err))
		}
		return conditions.Retry(updatev1.ContainerFailedReason, fmt.Errorf("creating the pod: %w", err))
	}
	ctrl.LoggerFrom(ctx).Info("started container pod", "pod", pod.Name, "round", round)
	st := &updatev1.ContainerStatus{PodName: pod.Name, ContainerName: UserContainer}
	// Copies: the job's status must not share st, or later changes to it
	// would not show as a change to write.
	first := *st
	status(ctx, &first)
	sess := c.Transfer.Open(pod.UID, checkout, result)
	defer c.Transfer.Close(sess)

	ended, err := c.await(ctx, pod, sess, st, containerTimeout(job.Spec.Update.Container))
	if ended {
		final := *st
		status(context.WithoutCancel(ctx), &final)
	}
	return err
}

// await watches a round's Pod until its upload arrives, it fails, or it
// runs out of time; st gets how the user's container ended. ended is
// false when the attempt itself is over (deadline, lost claim, shutdown):
// the Pod is stopped, and there is no round to report.
func (c *Containers) await(ctx context.Context, pod *corev1.Pod, sess *transfer.Session, st *updatev1.ContainerStatus,
	timeout time.Duration) (ended bool, err error) {
	grace := c.Grace
	if grace <= 0 {
		grace = podGrace
	}
	deadline := time.NewTimer(timeout + grace)
	defer deadline.Stop()
	poll := c.Poll
	if poll <= 0 {
		poll = time.Second
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// The Pod's upload would find no session; stop it.
			c.deletePod(context.WithoutCancel(ctx), pod)
			return false, ctx.Err()
		case <-sess.Done():
			if err := sess.Err(); err != nil {
				// What the container left is not something git can
				// hold, or is hostile: running it again changes nothing.
				return true, conditions.Stall(updatev1.ContainerFailedReason,
					fmt.Errorf("the result of pod %s was refused: %w", pod.Name, err))
			}
			// The upload runs after the user's container exited 0.
			st.ExitCode, st.Reason = ptr.To[int32](0), "Completed"
			return true, nil
		case <-deadline.C:
			why := c.pending(ctx, pod) // before the Pod goes
			c.deletePod(context.WithoutCancel(ctx), pod)
			st.Reason = updatev1.DeadlineExceededReason
			return true, conditions.Retry(updatev1.ContainerTimedOutReason,
				fmt.Errorf("pod %s did not finish within %s (spec.update.container.timeout)%s", pod.Name, timeout, why))
		case <-tick.C:
		}
		if err := c.check(ctx, pod, st, timeout); err != nil {
			return true, err
		}
	}
}

// check reads a running round's Pod: nil while it may still succeed.
func (c *Containers) check(ctx context.Context, pod *corev1.Pod, st *updatev1.ContainerStatus, timeout time.Duration) error {
	cur := &corev1.Pod{}
	if err := c.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
		if apierrors.IsNotFound(err) {
			return conditions.Retryf(updatev1.ContainerFailedReason, "pod %s was deleted before it finished", pod.Name)
		}
		ctrl.LoggerFrom(ctx).Error(err, "reading the container pod", "pod", pod.Name)
		return nil
	}
	if cur.UID != pod.UID {
		return conditions.Retryf(updatev1.ContainerFailedReason, "pod %s was replaced before it finished", pod.Name)
	}
	return podFailure(cur, st, timeout)
}

// pullFailures are the waiting reasons of a container whose image will not
// come; InvalidImageName never will.
var pullFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"RegistryUnavailable": true,
}

// podFailure reads a Pod's status: nil while it may still succeed, else
// the round's failure; st gets the user's container's state.
func podFailure(pod *corev1.Pod, st *updatev1.ContainerStatus, timeout time.Duration) error {
	timedOut := func() error {
		st.Reason = updatev1.DeadlineExceededReason
		return conditions.Retryf(updatev1.ContainerTimedOutReason,
			"pod %s did not finish within %s (spec.update.container.timeout)", pod.Name, timeout)
	}
	if pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "DeadlineExceeded" {
		return timedOut()
	}
	// The kubelet kills the containers of a Pod past activeDeadlineSeconds
	// and may report them (exit 137) before the Pod's reason: a container
	// killed after the deadline timed out, it did not fail.
	pastDeadline := pod.Status.StartTime != nil && time.Since(pod.Status.StartTime.Time) >= timeout
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		user := cs.Name == UserContainer
		if w := cs.State.Waiting; w != nil {
			if user {
				st.Reason = w.Reason
			}
			switch {
			case pullFailures[w.Reason]:
				err := fmt.Errorf("container %s: image %q: %s: %s", cs.Name, cs.Image, w.Reason, tail(w.Message))
				if w.Reason == "InvalidImageName" {
					return conditions.Stall(updatev1.ImagePullFailedReason, err)
				}
				return conditions.Retry(updatev1.ImagePullFailedReason, err)
			case w.Reason == "CreateContainerConfigError" || w.Reason == "CreateContainerError":
				return conditions.Retryf(updatev1.ContainerFailedReason, "container %s: %s: %s", cs.Name, w.Reason, tail(w.Message))
			}
		}
		t := cs.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		if pastDeadline {
			return timedOut()
		}
		if user {
			st.ExitCode, st.Reason = ptr.To(t.ExitCode), t.Reason
			return conditions.Retryf(updatev1.ContainerFailedReason, "container %s exited %d (%s)%s",
				cs.Name, t.ExitCode, t.Reason, said(t.Message))
		}
		return conditions.Retryf(conditions.FailedReason, "step %s of pod %s exited %d (%s)%s",
			cs.Name, pod.Name, t.ExitCode, t.Reason, said(t.Message))
	}
	if pod.Status.Phase == corev1.PodFailed {
		return conditions.Retryf(updatev1.ContainerFailedReason, "pod %s failed: %s%s", pod.Name, pod.Status.Reason, said(pod.Status.Message))
	}
	if pod.Status.Phase == corev1.PodSucceeded {
		// Succeeded without an upload: the upload step could not have
		// exited 0, unless someone changed the Pod's status.
		return conditions.Retryf(updatev1.ContainerFailedReason, "pod %s succeeded without uploading its result", pod.Name)
	}
	return nil
}

// pending says why a Pod that timed out had not run, when it says.
func (c *Containers) pending(ctx context.Context, pod *corev1.Pod) string {
	cur := &corev1.Pod{}
	if err := c.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
		return ""
	}
	for _, cond := range cur.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue {
			return fmt.Sprintf(": it was never scheduled (%s: %s)", cond.Reason, tail(cond.Message))
		}
	}
	if cur.Status.Phase != "" {
		return fmt.Sprintf(" (phase %s)", cur.Status.Phase)
	}
	return ""
}

func (c *Containers) deletePod(ctx context.Context, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := c.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).Error(err, "deleting the container pod", "pod", pod.Name)
	}
}

// said is ": " and the tail of a termination message, when there is one.
func said(msg string) string {
	if msg = tail(msg); msg == "" {
		return ""
	}
	return ": " + msg
}

// tail keeps the last messageTail bytes of a message, one line, printable:
// a container's last words are the useful ones, and a condition is no
// place for its whole log.
func tail(msg string) string {
	msg = strings.TrimSpace(msg)
	cut := false
	if len(msg) > messageTail {
		msg, cut = msg[len(msg)-messageTail:], true
	}
	msg = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case r == unicode.ReplacementChar || !unicode.IsPrint(r):
			return -1
		}
		return r
	}, msg)
	if cut {
		msg = "..." + msg
	}
	return msg
}

// PodFor is the Pod of one round of a container-mode job: steps fetch and
// update as init containers, upload as the container, all under the
// restricted Pod Security profile. Only the steps get the token.
func (c *Containers) PodFor(job *updatev1.UpdateJob, round int) *corev1.Pod {
	spec := job.Spec.Update.Container
	updatePath := path.Clean("/" + job.Spec.Update.Path)[1:]
	prefix := job.Name
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: prefix + "-",
			Namespace:    job.Namespace,
			Labels:       podLabels(job, round),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: updatev1.GroupVersion.String(),
				Kind:       updatev1.UpdateJobKind,
				Name:       job.Name,
				UID:        job.UID,
				Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// The steps' token is this ServiceAccount's; its identity
			// grants nothing (the transfer checks the Pod, and the Pod
			// mounts no API token).
			ServiceAccountName:            "default",
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			ActiveDeadlineSeconds:         ptr.To(int64(containerTimeout(spec).Seconds())),
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](stepUser),
				RunAsGroup:     ptr.To[int64](stepUser),
				FSGroup:        ptr.To[int64](stepUser),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			ImagePullSecrets: spec.ImagePullSecrets,
			InitContainers:   []corev1.Container{c.step(fetchContainer, updatePath), userContainer(spec, updatePath)},
			Containers:       []corev1.Container{c.step(uploadStep, updatePath)},
			Volumes:          podVolumes(),
		},
	}
}

// podLabels name the job and the run of it a Pod is.
func podLabels(job *updatev1.UpdateJob, round int) map[string]string {
	labels := map[string]string{
		LabelJobUID:                 string(job.UID),
		LabelAttempt:                fmt.Sprint(job.Status.Attempts),
		LabelRound:                  fmt.Sprint(round),
		"app.kubernetes.io/name":    "update-job",
		"app.kubernetes.io/part-of": "image-toolkit",
	}
	if len(job.Name) <= 63 {
		labels[LabelJobName] = job.Name
	}
	return labels
}

// restricted is a container's security context under the restricted Pod
// Security profile.
func restricted(readOnlyRoot bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   ptr.To(readOnlyRoot),
		RunAsNonRoot:             ptr.To(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// step is the container of one of the Pod's steps (fetch, upload): this
// controller's image, reaching the transfer server with the Pod's token.
func (c *Containers) step(name, updatePath string) corev1.Container {
	env := []corev1.EnvVar{
		{Name: transfer.EnvURL, Value: "https://" + c.Address},
		{Name: transfer.EnvCA, Value: string(c.Transfer.CertPEM())},
		{Name: transfer.EnvTokenFile, Value: tokenDir + "/token"},
		{Name: transfer.EnvWorkspace, Value: workspaceDir},
		{Name: transfer.EnvPath, Value: updatePath},
	}
	if c.MaxBytes > 0 {
		env = append(env, corev1.EnvVar{Name: transfer.EnvMaxBytes, Value: fmt.Sprint(c.MaxBytes)})
	}
	return corev1.Container{
		Name:  name,
		Image: c.StepImage,
		Args:  []string{"step", name},
		Env:   env,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		SecurityContext:          restricted(true),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "workspace", MountPath: workspaceDir},
			{Name: "token", MountPath: tokenDir, ReadOnly: true},
		},
	}
}

// userContainer runs spec.update.container in the checkout, at the
// update path unless it names its own working directory.
func userContainer(spec *updatev1.UpdateContainer, updatePath string) corev1.Container {
	workingDir := spec.WorkingDir
	if workingDir == "" {
		workingDir = path.Join(workspaceDir, updatePath)
	}
	env := append([]corev1.EnvVar{}, spec.Env...)
	if !hasEnv(env, "HOME") {
		// The root file system is read-only and user 65532 has no home:
		// tools that keep a cache or configuration there (helm, kustomize
		// plugins, git) get the writable /tmp.
		env = append(env, corev1.EnvVar{Name: "HOME", Value: "/tmp"})
	}
	user := corev1.Container{
		Name:                     UserContainer,
		Image:                    spec.Image,
		ImagePullPolicy:          spec.ImagePullPolicy,
		Command:                  spec.Command,
		Args:                     spec.Args,
		Env:                      env,
		EnvFrom:                  spec.EnvFrom,
		WorkingDir:               workingDir,
		SecurityContext:          restricted(true),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "workspace", MountPath: workspaceDir},
			{Name: "tmp", MountPath: "/tmp"},
		},
	}
	if spec.Resources != nil {
		user.Resources = *spec.Resources
	}
	return user
}

// podVolumes are the Pod's scratch space and the steps' projected token.
func podVolumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: transfer.Audience, ExpirationSeconds: ptr.To[int64](tokenExpiry), Path: "token",
			}}},
		}}},
	}
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// errNoContainers: container mode needs the transfer address and the step
// image.
var errNoContainers = errors.New("this job runs a container (spec.update.container), but the update-job-controller runs without --transfer-address and --step-image, which container mode needs (the chart sets both)")
