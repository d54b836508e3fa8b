// Package acl reads, builds and writes POSIX access ACLs (the
// system.posix_acl_access extended attribute) without a setfacl binary:
// Parse and Encode its kernel format, FromMode and WithUser to build one,
// Grant to add a named user's entry to an open file, and MayAccess to
// decide what a uid:gid may do with a path. The service uses them to let a
// call read its session directory and spill files, which the harness user
// owns with mode 0700/0600.
//
// It imports only the standard library and sandbox (for its error
// classes); hostpath, capture and policy import it.
package acl
