// Command fluxapi is the yardstick of TestAnOutsideModuleImportsTheAPITypes:
// another project importing Flux's image-automation API types (its `api`
// module, pinned here at the last release that builds with Go 1.26), whose
// module graph ours must not exceed.
package main

import (
	_ "github.com/fluxcd/image-automation-controller/api/v1"
)

func main() {}
