package oci

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// mountNamespace is one OS thread parked in a private mount namespace in
// which the cgroup2 mounts of a hybrid cgroup host are unmounted. crun
// 1.8 refuses a hybrid layout ("cgroups in hybrid mode not supported"),
// and DESIGN §3.11 asks for the unified mount to be hidden from it; a
// child forked from that thread inherits the namespace, so crun sees a
// pure cgroup v1 host without any extra process per call (no unshare(1),
// no shell, no re-exec).
//
// The thread is locked for its whole life and never returns to Go's
// scheduler; close ends it, which makes the runtime discard the thread
// and with it the namespace. Starts are serialized through the thread;
// a start costs one fork, as usual. Safe for concurrent use.
type mountNamespace struct {
	reqs chan func()
	quit chan struct{} // closed by close
	done chan struct{} // closed when the thread is gone
}

// newMountNamespace creates the thread and its namespace, hiding every
// mount point in hide. The caller must be root.
func newMountNamespace(hide []string) (*mountNamespace, error) {
	ns := &mountNamespace{reqs: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go ns.run(hide, ready, nil)
	if err := <-ready; err != nil {
		<-ns.done
		return nil, err
	}
	return ns, nil
}

// run locks its goroutine to a thread other than the process's main
// thread (whose namespaces /proc/self shows and which Go never
// terminates), moves that thread into a new private mount namespace and
// serves requests until close. relocked, when set, is closed once run
// holds its final thread.
func (ns *mountNamespace) run(hide []string, ready chan<- error, relocked chan<- struct{}) {
	// Never unlocked: when this goroutine returns, the runtime
	// terminates the thread instead of reusing it elsewhere.
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// On the main thread: hand over to a goroutine that cannot be
		// scheduled here while this one holds the thread.
		moved := make(chan struct{})
		go ns.run(hide, ready, moved)
		<-moved
		runtime.UnlockOSThread()
		return
	}
	if relocked != nil {
		close(relocked)
	}
	defer close(ns.done)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		ready <- fmt.Errorf("unshare mount namespace: %w", err)
		return
	}
	// Private first, so that the unmounts below stay in this namespace
	// instead of propagating to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		ready <- fmt.Errorf("make / private in mount namespace: %w", err)
		return
	}
	for _, m := range hide {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			ready <- fmt.Errorf("hide %q in mount namespace: %w", m, err)
			return
		}
	}
	ready <- nil
	for {
		select {
		case f := <-ns.reqs:
			f()
		case <-ns.quit:
			return
		}
	}
}

// do runs f on the namespace's thread, so that mounts and unmounts it
// makes happen in the namespace (the host does not see them).
func (ns *mountNamespace) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case ns.reqs <- func() { errc <- f() }:
	case <-ns.done:
		return fmt.Errorf("mount namespace closed")
	}
	return <-errc
}

// start starts cmd from the namespace's thread.
func (ns *mountNamespace) start(cmd *exec.Cmd) error {
	if err := ns.do(cmd.Start); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return nil
}

// close ends the thread; starts after close fail. Not safe to call twice.
func (ns *mountNamespace) close() {
	close(ns.quit)
	<-ns.done
}
