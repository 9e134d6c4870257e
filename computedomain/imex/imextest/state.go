package imextest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpudra/gpudra/internal/atomicfile"
)

// The fake's files, in the directory of the config file it is started with.
const (
	// StateFile is where the fake nvidia-imex records itself (State, JSON).
	StateFile = "fakeimex-state.json"
	// FaultsFile is where a test injects faults (Faults, JSON); each start of the fake reads it.
	FaultsFile = "fakeimex-faults.json"
	// QueryFailuresFile holds how many of the next nvidia-imex-ctl queries fail (FailQueries);
	// each query reads it.
	QueryFailuresFile = "fakeimex-query-failures"
)

// State is what the fake nvidia-imex records about itself, and what the fake nvidia-imex-ctl
// answers from.
type State struct {
	// PID is the process ID of the fake's latest start.
	PID int `json:"pid"`
	// Starts counts the fake's starts in this directory.
	Starts int `json:"starts"`
	// StartTimes holds when each start began.
	StartTimes []time.Time `json:"startTimes"`
	// BindIP is the config's BIND_INTERFACE_IP.
	BindIP string `json:"bindIP"`
	// Nodes is the nodes file the latest start read, one address each.
	Nodes []string `json:"nodes"`
	// Ready is set once the latest start became ready, and cleared when it stops on a signal.
	Ready bool `json:"ready"`
}

// Faults is what a test makes the fake nvidia-imex do wrong. Zero values inject nothing.
type Faults struct {
	// ExitCode, when not 0, makes each start exit at once with this code (after recording
	// its start).
	ExitCode int `json:"exitCode,omitempty"`
	// ReadyAfter delays readiness (0: ready at once).
	ReadyAfter time.Duration `json:"readyAfter,omitempty"`
	// NeverReady keeps every start from becoming ready.
	NeverReady bool `json:"neverReady,omitempty"`
	// DieAfter, when not 0, makes each start exit with code 1 after that long.
	DieAfter time.Duration `json:"dieAfter,omitempty"`
	// IgnoreSIGTERM makes each start ignore SIGTERM (and SIGINT): only SIGKILL stops it.
	IgnoreSIGTERM bool `json:"ignoreSIGTERM,omitempty"`
}

// ReadState returns the state the fake recorded in dir.
func ReadState(dir string) (State, error) {
	var s State
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	return s, nil
}

// WriteState replaces the state in dir (atomically: the fake nvidia-imex-ctl may read it at
// any moment; a crash of the writer leaves the old or the new state).
func WriteState(dir string, s State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return atomicfile.New().Write(filepath.Join(dir, StateFile), b, 0o644, atomicfile.ProcessCrash)
}

// WriteFaults makes the next starts of the fake nvidia-imex in dir misbehave as f says.
func WriteFaults(dir string, f Faults) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return atomicfile.New().Write(filepath.Join(dir, FaultsFile), b, 0o644, atomicfile.ProcessCrash)
}

// ClearFaults removes the injected faults in dir.
func ClearFaults(dir string) error {
	if err := os.Remove(filepath.Join(dir, FaultsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// FailQueries makes the next n nvidia-imex-ctl queries in dir fail as they do when nvidia-imex
// does not answer (exit status 1), whatever its state; 0 ends the failures.
func FailQueries(dir string, n int) error {
	return atomicfile.New().Write(filepath.Join(dir, QueryFailuresFile), []byte(strconv.Itoa(max(n, 0))), 0o644, atomicfile.ProcessCrash)
}

// QueriesToFail returns how many of the next nvidia-imex-ctl queries in dir fail (0 when none
// were asked to).
func QueriesToFail(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, QueryFailuresFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, QueryFailuresFile), err)
	}
	return n, nil
}

// ReadFaults returns the faults injected in dir (none when the file is missing).
func ReadFaults(dir string) (Faults, error) {
	var f Faults
	b, err := os.ReadFile(filepath.Join(dir, FaultsFile))
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", filepath.Join(dir, FaultsFile), err)
	}
	return f, nil
}

// Alive reports whether process pid exists and is not a zombie (dead, not yet reaped by its
// parent), from /proc.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	switch s[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}
