package sandbox

import "time"

// JobOutput is one read of a background job.
type JobOutput struct {
	// ID is the job id.
	ID string `json:"id"`
	// Stdout and Stderr are the output produced since the previous read,
	// at most the call's tail size each (the newest bytes are kept).
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutDropped and StderrDropped count the bytes produced since the
	// previous read that are not in Stdout and Stderr because they were
	// not read in time. The spill files of the final Result hold them.
	StdoutDropped int64 `json:"stdoutDropped"`
	StderrDropped int64 `json:"stderrDropped"`
	// Done is true once the job has ended; then exactly one of Result and
	// Err is set, and all output has been delivered by this or earlier
	// reads.
	Done   bool    `json:"done"`
	Result *Result `json:"result,omitempty"`
	// Err is the sandbox error Executor.Run returned.
	Err error `json:"-"`
}

// JobInfo describes a job for List.
type JobInfo struct {
	ID      string    `json:"id"`
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Done    bool      `json:"done"`
}
