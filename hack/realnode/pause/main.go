// Command pause is the pod sandbox process of the real-node tests: it holds the pod's
// namespaces and does nothing until it is told to stop, like Kubernetes' own pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
