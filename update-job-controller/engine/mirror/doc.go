// Package mirror is the write-back engine's git, with libgit2 (git2go): a
// Cache of bare mirrors, one per repository URL, that a run fetches into
// (only what is new since the last run: libgit2 1.5 has no shallow clone),
// checks out from, commits into (signed by a Signer) and pushes from.
//
// It is a public package of its own, beside the engine, because the
// engine's constructor takes the Cache: a front end (the
// update-job-controller, tk-image, a program embedding the engine) makes
// one, sized and placed as it needs, and shares it between runs. Network
// I/O goes through transports of our own (transport.go) that carry a
// context and pkg/git's authentication, TLS and SSH host key checks, not
// libgit2's. libgit2 speaks the fetch protocol over them; a push is spoken
// here (push.go, pkg/git's receive-pack half), so that its pack holds what
// the commit changed instead of what libgit2's walk of every tree of the
// server's refs leaves. A file:// repository (for programs whose plans
// are their own user's: engine.Settings.FileURLs) is one more such
// transport, which runs git's own upload-pack and receive-pack on the
// repository as git does for a local remote (transport_file.go), so that a
// local push is the same conversation, hooks and report included.
//
// This package needs cgo and libgit2 1.5.
package mirror
