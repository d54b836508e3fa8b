// Package signals names Linux signals the way Result.Signal spells them
// ("SIGKILL", "SIGRTMIN+3"): Name and its inverse Number. Containers
// always run on a Linux kernel, so the numbering is Linux's whatever the
// host of the caller. It imports only the standard library; sandbox
// imports it for ExitCode.
package signals
