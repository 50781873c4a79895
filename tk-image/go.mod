module toolkit.dev/image-toolkit/tk-image

go 1.26.0

require (
	github.com/spf13/cobra v1.10.2
	toolkit.dev/image-toolkit/pkg v0.0.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
)

// Every module builds on its own too (e.g. in a container build); in the
// workspace, go.work supersedes this.
replace toolkit.dev/image-toolkit/pkg => ../pkg
