// Package childenv builds the environment of a call's child from nothing,
// in the ordered layers of DESIGN §3.6 (Build over an Input: the image's
// env, inherited names, the terminal settings, ordinary env, the DSH_*
// snapshot), and holds the rules it applies on the way: which names may be
// inherited (Inheritable), which names and values look like secrets
// (SecretName, SecretValue) and which lie in the DSH_ namespace
// (IsDSHName). CheckEntries and CheckName validate a layer as Build does.
// Everything here is pure and safe for concurrent use.
//
// It imports only the standard library and sandbox (for its error
// classes).
package childenv
