// Command pause is the sandbox ("pause") image of the test cluster that
// scripts/kube.sh starts: it holds a pod's namespaces and does nothing. It
// sleeps until SIGTERM or SIGINT and then exits 0; as pid 1 of the pod's
// sandbox it has no children to reap (containers are siblings).
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
