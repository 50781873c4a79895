// Package git is the one place image-toolkit turns a repository URL and the
// data of the Secrets a GitRepository (or UpdateJob) names into a way to
// reach the server: authentication, trust (TLS roots, SSH known_hosts),
// proxies and dialing for smart HTTP(S) and SSH. The
// image-automation-controller lists a branch's head with it (ListRefs, in
// pure Go); the update-job-controller's libgit2 transports fetch and push
// over the same connections. So one Secret gets one verdict from both, and
// a failure gets one classification:
//
//   - ErrInvalidCredentials: the Secret cannot work whatever the server
//     says (a missing or malformed key); retrying does not help.
//   - ErrAuthentication: the server, or our check of the server, refused:
//     credentials refused, a host key known_hosts does not list, a TLS
//     certificate that does not verify, a proxy that wants credentials.
//
// Everything else is a git operation failure, worth retrying. Errors never
// hold a secret: URLs are redacted and server messages scrubbed.
//
// The package needs no cgo (libgit2 stays in the update-job-controller) and
// no Kubernetes: it takes the Secrets' data as plain values (Secrets), and
// pkg/git/gitsecret reads them from the API server for the controllers.
// The write-back engine imports this package and not that one, so that a
// program embedding the engine links no Kubernetes client.
package git
