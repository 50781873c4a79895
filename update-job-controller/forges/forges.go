// Package forges are image-toolkit's built-in forge adapters, over each
// forge's official client library: GitHub (google/go-github), GitLab
// (gitlab.com/gitlab-org/api/client-go) and Gitea, which covers Forgejo
// (code.gitea.io/sdk/gitea). The libraries are used rather than
// hand-written REST because they track the APIs' shapes and pagination;
// fluxcd/go-git-providers was not chosen because its common interface has
// no labels, reviewers, draft, close or comments, so every adapter would
// have gone around it to the same clients.
//
// Each adapter is one pkg/forge.Forge value. The write-back engine imports
// only pkg/forge, so that a program embedding it links none of these
// libraries unless it registers them: the update-job-controller and
// tk-image call Register at start.
package forges

import (
	"sync"

	"toolkit.dev/image-toolkit/pkg/forge"
)

// Builtin are the built-in forges' entries.
func Builtin() []forge.Forge {
	return []forge.Forge{GitHubForge, GitLabForge, GiteaForge}
}

var registerOnce sync.Once

// Register registers the built-in forges in pkg/forge's registry, once
// however often it is called.
func Register() {
	registerOnce.Do(func() {
		for _, f := range Builtin() {
			forge.Register(f)
		}
	})
}
