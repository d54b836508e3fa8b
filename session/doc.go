// Package session holds the dsh-compatible session header: its exact
// on-disk JSON form, validation with typed errors that name the field, new
// session ids, and the lifecycle constructors for resume, fork and spawn.
//
// It is the lowest layer of the module and imports only the standard
// library; every other package may import it.
package session
