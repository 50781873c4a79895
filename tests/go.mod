module toolkit.dev/image-toolkit/tests

go 1.26.0

require toolkit.dev/image-toolkit/pkg v0.0.0

// Every module builds on its own too (e.g. in a container build); in the
// workspace, go.work supersedes this.
replace toolkit.dev/image-toolkit/pkg => ../pkg
