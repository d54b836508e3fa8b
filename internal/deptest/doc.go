// Package deptest holds the test that enforces the dependency direction of
// DESIGN §2: lower layers never import higher ones. It has no code of its
// own and nothing imports it.
package deptest
