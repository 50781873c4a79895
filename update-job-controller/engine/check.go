package engine

import (
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// Check tells whether the engine can run the plan, without any network
// call: writeback's own checks, then the forge of a pull request (known,
// with an owner and a name in the URL) and the templates. Its errors are
// KindInvalid and Terminal. Run checks too; a front end calls Check to
// refuse a plan before spending anything on it. The messages name the
// UpdateJob's fields (push.pullRequest), the API the plan's words come
// from. A file:// repository is refused here; an Engine with
// Settings.FileURLs runs one (Engine.Check).
func Check(plan writeback.Plan) error { return check(plan, false) }

// Check is the package's Check under this Engine's settings: with
// Settings.FileURLs, a file:// repository passes.
func (e *Engine) Check(plan writeback.Plan) error { return check(plan, e.settings.FileURLs) }

func check(plan writeback.Plan, fileURLs bool) error {
	validate := plan.Validate
	if fileURLs {
		validate = plan.ValidateAllowingFileURLs
	}
	if err := validate(); err != nil {
		return terminal(KindInvalid, err)
	}
	if pr := plan.Target.PullRequest; pr != nil {
		if _, err := forge.Resolve(plan.Repository, forge.Provider(pr.Provider), pr.APIURL); err != nil {
			return invalidf("push.pullRequest: %v", err)
		}
		for _, t := range []struct {
			tmpl commitmsg.Template
			text string
		}{
			{commitmsg.PullRequestBranch, pr.HeadTemplate},
			{commitmsg.PullRequestTitle, pr.TitleTemplate},
			{commitmsg.PullRequestBody, pr.BodyTemplate},
		} {
			if err := t.tmpl.Validate(t.text, plan.Commit.Values); err != nil {
				return invalidf("push.pullRequest: %v", err)
			}
		}
	}
	if err := commitmsg.Validate(plan.Commit.MessageTemplate, plan.Commit.Values); err != nil {
		return terminal(KindInvalid, err)
	}
	return nil
}
