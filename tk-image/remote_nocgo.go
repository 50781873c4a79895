//go:build !cgo

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// linkedLibraries adds nothing to the version: a static build links no C.
const linkedLibraries = ""

// errNoCgo: the engine links libgit2, which a static build leaves out.
var errNoCgo = errors.New("this tk-image was built without cgo; updating a remote repository (--repository) needs libgit2 1.5: use a tk-image built with cgo (make build, or the tk-image image)")

func (o *updateOptions) runRemote(*cobra.Command) error {
	if err := o.remote.needRepository(); err != nil {
		return err
	}
	return errNoCgo
}
