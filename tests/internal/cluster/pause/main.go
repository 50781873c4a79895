// Command pause is the cluster's pod sandbox image: it holds the pod's
// namespaces and exits on SIGTERM or SIGINT. As PID 1 of its namespace it
// gets no default signal handling, so it must handle them itself, or every
// pod deletion would wait for the runtime's SIGKILL.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
