// Package integration holds end-to-end tests that build the dsh-sandbox
// binary and drive it as a user would, against the real runtimes. They
// need root and the runtimes installed (scripts/setup.sh) and run under
// the build tag "integration". Nothing imports this package.
package integration
