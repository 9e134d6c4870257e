// Package input reads what a user hands the driver and its tools: files, stdin and the bytes in
// them. Reads are bounded (a limit per kind of input, an error naming the input and the limit
// beyond it) and honour a context, so a FIFO, /dev/zero or a terminal never hangs a command past
// a signal. Decoding is strict: unknown fields, fields spelled in another case and duplicate
// keys are errors.
package input
