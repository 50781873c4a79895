// Package forges are image-toolkit's built-in forge adapters. GitHub
// (google/go-github), GitLab (gitlab.com/gitlab-org/api/client-go) and
// Gitea, which covers Forgejo (code.gitea.io/sdk/gitea), go through each
// forge's official client library, which tracks the API's shapes and
// pagination; fluxcd/go-git-providers was not chosen because its common
// interface has no labels, reviewers, draft, close or comments, so every
// adapter would have gone around it to the same clients. Bitbucket Cloud,
// Bitbucket Data Center and Azure DevOps speak their REST APIs directly
// (rest.go): Bitbucket has no official Go library, and Azure DevOps'
// generated one would weigh more in the job controller than the few calls
// an update stream makes.
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
	return []forge.Forge{GitHubForge, GitLabForge, GiteaForge, BitbucketForge, BitbucketServerForge, AzureDevOpsForge, GerritForge}
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
