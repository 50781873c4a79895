package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// tk-image job logs finds the Pod of a container-mode job (the last run from
// status.container, or the last round of --attempt by its labels) and asks
// the API server for its user container's logs; a job without a container,
// one that has not started one, and an attempt without a Pod are told
// apart. The API server here has no node, so the request itself fails with
// the API server's reason, naming the Pod: the logs' content is proved on
// the real node (tests/node).
func TestJobLogs(t *testing.T) {
	c := startExplainCluster(t)
	ns := "apps"
	c.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, nil)
	spec := func(container bool) updatev1.UpdateJobSpec {
		s := updatev1.UpdateJobSpec{
			Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/fleet"},
			Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
			Commit:     updatev1.CommitSpec{Author: updatev1.CommitUser{Email: "bot@example.com"}},
			Update:     updatev1.UpdateSpec{Setters: []updatev1.PolicySetter{{Policy: "apps:a", ImageRef: meta.ImageRef{Name: "a", Tag: "1"}}}},
		}
		if container {
			s.Update = updatev1.UpdateSpec{Container: &updatev1.UpdateContainer{Image: "busybox"}}
		}
		return s
	}
	builtin := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: "builtin", Namespace: ns}, Spec: spec(false)}
	c.create(t, builtin, nil)
	waiting := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: "waiting", Namespace: ns}, Spec: spec(true)}
	c.create(t, waiting, nil)
	ran := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: "ran", Namespace: ns}, Spec: spec(true)}
	c.create(t, ran, func() {
		ran.Status.Phase, ran.Status.Attempts = updatev1.UpdateJobFailed, 2
		ran.Status.Container = &updatev1.ContainerStatus{PodName: "ran-last", ContainerName: updatev1.UserContainerName}
	})
	for _, p := range []struct {
		name           string
		attempt, round string
	}{{"ran-1-0", "1", "0"}, {"ran-1-1", "1", "1"}, {"ran-last", "2", "0"}} {
		c.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns, Labels: map[string]string{
				updatev1.PodJobUIDLabel: string(ran.UID), updatev1.PodAttemptLabel: p.attempt, updatev1.PodRoundLabel: p.round,
			}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: updatev1.UserContainerName, Image: "busybox"}}},
		}, nil)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"builtin"}, 1, "runs the built-in setters"},
		{[]string{"waiting"}, 1, "has not started a container yet"},
		{[]string{"ran"}, 0, "==> pod apps/ran-last, container update <=="},
		{[]string{"ran", "--attempt", "1"}, 0, "==> pod apps/ran-1-1, container update <=="},
		{[]string{"ran", "--attempt", "3"}, 1, "has no pod of attempt 3 (it made 2 attempts"},
		{[]string{"missing"}, 1, `"missing" not found`},
		{[]string{}, 2, "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, "", append([]string{"--kubeconfig", c.kubeconfig, "-n", ns, "job", "logs"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d and %q", code, errs, out, tt.code, tt.want)
			}
		})
	}
}

// A container-mode job's outcome speaks of files: its changes with their
// operation, "the container left the files as they were", and, when it
// failed, where the container's log is.
func TestContainerJobOutcome(t *testing.T) {
	job := func(phase updatev1.UpdateJobPhase) *updatev1.UpdateJob {
		j := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: "bump", Namespace: "apps"}}
		j.Spec.Update.Container = &updatev1.UpdateContainer{Image: "busybox"}
		j.Status.Phase = phase
		j.Status.Container = &updatev1.ContainerStatus{PodName: "bump-x7", ContainerName: updatev1.UserContainerName}
		return j
	}
	ok := job(updatev1.UpdateJobSucceeded)
	ok.Status.PushedCommit, ok.Status.PushedRefs = "abc", []string{"refs/heads/main"}
	ok.Status.Result = &updatev1.UpdateResult{Files: []meta.FileResult{
		{Path: "Chart.lock", Operation: meta.FileModified}, {Path: "charts/redis-1.tgz", Operation: meta.FileAdded}}}
	failed := job(updatev1.UpdateJobFailed)
	failed.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "False", Reason: updatev1.ContainerFailedReason, Message: "container update exited 1"}}
	tests := []struct {
		job  *updatev1.UpdateJob
		out  string
		fail string
	}{
		{ok, "pushed commit abc to refs/heads/main\nChart.lock (modified)\ncharts/redis-1.tgz (added)\n", ""},
		{job(updatev1.UpdateJobNoChange), "no change: the container left the files as they were\n", ""},
		{failed, "container update of pod bump-x7: tk-image job logs bump -n apps\n", "ContainerFailed: container update exited 1"},
	}
	for _, tt := range tests {
		var out strings.Builder
		err := jobOutcome(tt.job, &out)
		if out.String() != tt.out || (err == nil) != (tt.fail == "") || (err != nil && !strings.Contains(err.Error(), tt.fail)) {
			t.Errorf("%s: out %q, err %v; want %q, %q", tt.job.Status.Phase, out.String(), err, tt.out, tt.fail)
		}
	}
}
