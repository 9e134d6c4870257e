package imex

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpudra/gpudra/internal/atomicfile"
)

// The files of a daemon's directory (computedomain.DaemonConfigDir in the daemon's container).
const (
	// ConfigFile is nvidia-imex's config file.
	ConfigFile = "config.cfg"
	// NodesFile is nvidia-imex's node list: one peer address a line.
	NodesFile = "nodes_config.cfg"
	// LogFile is where nvidia-imex writes its log.
	LogFile = "nvidia-imex.log"
)

// The ports nvidia-imex's documentation gives as defaults.
const (
	// DefaultServerPort is the TCP port on which nvidia-imex talks to its peers.
	DefaultServerPort = 50000
	// DefaultCommandPort is the TCP port of nvidia-imex's command service, which
	// nvidia-imex-ctl queries.
	DefaultCommandPort = 50005
)

// fileMode: the files hold no secret (addresses, ports, paths); the directory's own mode (0700,
// the node plugin's) is what keeps other users out, so the files need not repeat it.
const fileMode = 0o644

// IMEXConfig is what a daemon sets in nvidia-imex's config file. Render writes these keys,
// and no others (nvidia-imex's defaults hold for the rest):
//
//   - DAEMONIZE=0: nvidia-imex stays this process's child, so that the Supervisor sees it
//     exit and can stop it; a daemonizing nvidia-imex would look dead at once.
//   - BIND_INTERFACE_IP=<BindIP>: the address its peers reach it at, the one the node reports
//     in the domain's status and that stands in every peer's nodes file.
//   - SERVER_PORT=<ServerPort>: written out rather than left to the default, because every
//     node of a domain must use the same one.
//   - IMEX_NODE_CONFIG_FILE=<Dir>/nodes_config.cfg: the node list this daemon writes.
//   - LOG_FILE_NAME=<Dir>/nvidia-imex.log: the log stays in the domain's directory, beside
//     the files that explain it.
//   - IMEX_CMD_ENABLED=1, IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1, IMEX_CMD_PORT=<CommandPort>:
//     the command service that nvidia-imex-ctl asks whether the daemon is ready; only the
//     daemon's own container needs it, so it listens on loopback only.
type IMEXConfig struct {
	// Dir is the daemon's directory (absolute): the config, the nodes file and the log live in it.
	Dir string
	// BindIP is the node's address for its peers (the daemon pod's IP).
	BindIP netip.Addr
	// ServerPort is the peers' port; 0 means DefaultServerPort.
	ServerPort int
	// CommandPort is the command service's port; 0 means DefaultCommandPort.
	CommandPort int
}

// withDefaults returns c with zero ports replaced by the defaults.
func (c IMEXConfig) withDefaults() IMEXConfig {
	if c.ServerPort == 0 {
		c.ServerPort = DefaultServerPort
	}
	if c.CommandPort == 0 {
		c.CommandPort = DefaultCommandPort
	}
	return c
}

// Validate returns an error naming each field that nvidia-imex could not use.
func (c IMEXConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := checkDir(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("dir: %w", err))
	}
	if !c.BindIP.IsValid() || c.BindIP.IsUnspecified() {
		errs = append(errs, fmt.Errorf("bindIP %q: must be the node's own IPv4 or IPv6 address", c.BindIP))
	}
	for _, p := range []struct {
		name string
		port int
	}{{"serverPort", c.ServerPort}, {"commandPort", c.CommandPort}} {
		if p.port < 1 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("%s %d: must be 1 to 65535", p.name, p.port))
		}
	}
	if c.ServerPort == c.CommandPort {
		errs = append(errs, fmt.Errorf("serverPort and commandPort are both %d: they must differ", c.ServerPort))
	}
	return errors.Join(errs...)
}

// checkDir accepts a clean absolute path that fits on one line of a config file.
func checkDir(dir string) error {
	switch {
	case dir == "":
		return errors.New("must be set")
	case !filepath.IsAbs(dir) || filepath.Clean(dir) != dir:
		return fmt.Errorf("%q must be a clean absolute path", dir)
	case strings.ContainsAny(dir, "\r\n\x00#="):
		return fmt.Errorf("%q must not hold a line break, NUL, '#' or '='", dir)
	}
	return nil
}

// ConfigPath is the config file's path in c.Dir.
func (c IMEXConfig) ConfigPath() string { return filepath.Join(c.Dir, ConfigFile) }

// NodesPath is the nodes file's path in c.Dir.
func (c IMEXConfig) NodesPath() string { return filepath.Join(c.Dir, NodesFile) }

// Render returns the config file's content (see IMEXConfig for its keys), or Validate's error.
func (c IMEXConfig) Render() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("nvidia-imex config: %w", err)
	}
	c = c.withDefaults()
	var b bytes.Buffer
	b.WriteString("# Written by the gpudra IMEX daemon; rewritten on every start.\n")
	for _, kv := range [][2]string{
		{"DAEMONIZE", "0"},
		{"BIND_INTERFACE_IP", c.BindIP.String()},
		{"SERVER_PORT", fmt.Sprint(c.ServerPort)},
		{"IMEX_NODE_CONFIG_FILE", c.NodesPath()},
		{"LOG_FILE_NAME", filepath.Join(c.Dir, LogFile)},
		{"IMEX_CMD_ENABLED", "1"},
		{"IMEX_CMD_BIND_INTERFACE_IP", "127.0.0.1"},
		{"IMEX_CMD_PORT", fmt.Sprint(c.CommandPort)},
	} {
		fmt.Fprintf(&b, "%s=%s\n", kv[0], kv[1])
	}
	return b.Bytes(), nil
}

// RenderNodes returns the nodes file's content: the peers' addresses, one a line, in the
// order given (the Daemon sorts them by node name). An empty or duplicate address is an error:
// nvidia-imex would wait for a peer that cannot come.
func RenderNodes(peers []netip.Addr) ([]byte, error) {
	seen := map[netip.Addr]bool{}
	var b bytes.Buffer
	for i, p := range peers {
		if !p.IsValid() || p.IsUnspecified() {
			return nil, fmt.Errorf("nodes file: peer %d: %q is not a node address", i, p)
		}
		if seen[p] {
			return nil, fmt.Errorf("nodes file: peer %d: %s appears twice", i, p)
		}
		seen[p] = true
		b.WriteString(p.String() + "\n")
	}
	return b.Bytes(), nil
}

// Writer writes a daemon's files. Each write replaces the file atomically (a temporary file
// renamed over it): nvidia-imex, started at any moment, reads the old content or the new one,
// never a torn one, even when this process is killed mid-write. Nothing is fsynced: the files
// must survive a process crash, not a power loss, because the daemon rewrites both from the
// domain's status every time it starts, and the directory is the pod's (the node plugin
// removes it with the daemon's claim).
type Writer struct {
	files *atomicfile.Files
}

// NewWriter returns a Writer.
func NewWriter() *Writer { return &Writer{files: atomicfile.New()} }

// WriteConfig writes c's config file into c.Dir, which must exist.
func (w *Writer) WriteConfig(c IMEXConfig) error {
	data, err := c.Render()
	if err != nil {
		return err
	}
	if err := w.files.Write(c.ConfigPath(), data, fileMode, atomicfile.ProcessCrash); err != nil {
		return fmt.Errorf("nvidia-imex config: %w", err)
	}
	return nil
}

// WriteNodes writes the nodes file into c.Dir and reports whether its content changed (a
// missing file counts as changed): nvidia-imex reads it only when it starts.
func (w *Writer) WriteNodes(c IMEXConfig, peers []netip.Addr) (changed bool, err error) {
	data, err := RenderNodes(peers)
	if err != nil {
		return false, err
	}
	old, err := os.ReadFile(c.NodesPath())
	if err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("nvidia-imex nodes file: %w", err)
	}
	if err := w.files.Write(c.NodesPath(), data, fileMode, atomicfile.ProcessCrash); err != nil {
		return false, fmt.Errorf("nvidia-imex nodes file: %w", err)
	}
	return true, nil
}
