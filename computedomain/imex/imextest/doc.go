// Package imextest runs package computedomain/imex without NVIDIA's binaries or an API server:
// a fake nvidia-imex and nvidia-imex-ctl (one program, imextest/fakeimex, that picks its role
// by the name it is started as), a driver root that holds them, and a controller-runtime fake
// client for ComputeDomains.
//
//	root := imextest.NewDriverRoot(t) // usr/bin/nvidia-imex, usr/bin/nvidia-imex-ctl, a loader
//	sup := imex.NewSupervisor(configPath, imex.WithDriverRoot(root))
//	go sup.Run(ctx)
//	st, err := imextest.ReadState(dir) // the fake's PID, starts, node list, readiness
//
// # The fake nvidia-imex
//
// Started as `nvidia-imex -c CONFIG`, it reads the config strictly (ParseConfig: only the keys
// package imex writes, DAEMONIZE=0, valid addresses and ports) and the nodes file (ParseNodes:
// one address a line, no duplicates, its own BIND_INTERFACE_IP among them); on a bad one it
// prints the file, line and problem to stderr and exits 1. It then records its PID, node list
// and start (StateFile, next to the config), becomes ready (at once, or after
// Faults.ReadyAfter) and runs until SIGTERM or SIGINT, after which it records that it is no
// longer ready and exits 0. Faults (FaultsFile, read at each start) make it exit at start with
// a code, never become ready, die after a while, or ignore SIGTERM. It exits by itself when
// the process that started it is gone, so that a killed test leaves no process behind.
//
// # The fake nvidia-imex-ctl
//
// Only query mode: `nvidia-imex-ctl -q [-c CONFIG]` prints ReadyAnswer ("READY") and exits 0
// when the recorded process is alive (not a zombie) and ready, prints "UNAVAILABLE" and exits 0
// when it is alive and not ready, and exits 1 with a message when it is not running or the
// config disables the command service. FailQueries makes the next n queries exit 1 as if
// nvidia-imex did not answer (QueryFailuresFile, read at each query).
//
// # Limits
//
// Like controller-runtime's client/fake, these are stand-ins, not NVIDIA's programs: the fake
// nvidia-imex opens no socket (no peer connections, no command service; the ports are only
// checked), never daemonizes, knows none of nvidia-imex's other config keys (an unknown key is
// an error, where nvidia-imex may ignore it), creates no IMEX channels, and treats readiness as
// a timer rather than a quorum of peers. nvidia-imex-ctl's other modes (-N, -H) are missing. A
// recorded PID reused by another process after the fake died reads as alive. The fake client
// (NewClientBuilder) does not validate objects against the CRD (required fields, enums), and
// it turns each apply into a typed ComputeDomain first, so an applied entry claims every field
// of the entry with its Go value (an absent index becomes an owned index 0), where the API
// server, which keeps a custom resource's apply as sent, claims only the fields sent.
package imextest
