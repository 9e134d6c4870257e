package imextest

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Config is the part of nvidia-imex's config file the fake understands.
type Config struct {
	// Path is the config file.
	Path string
	// Daemonize is DAEMONIZE.
	Daemonize string
	// BindIP is BIND_INTERFACE_IP.
	BindIP netip.Addr
	// ServerPort is SERVER_PORT.
	ServerPort int
	// NodesFile is IMEX_NODE_CONFIG_FILE.
	NodesFile string
	// LogFile is LOG_FILE_NAME.
	LogFile string
	// CmdEnabled is IMEX_CMD_ENABLED=1.
	CmdEnabled bool
	// CmdBindIP is IMEX_CMD_BIND_INTERFACE_IP.
	CmdBindIP string
	// CmdPort is IMEX_CMD_PORT.
	CmdPort int
}

// knownKeys are the config keys the fake accepts; any other key is an error (the real
// nvidia-imex knows many more).
func knownKeys() []string {
	return []string{
		"DAEMONIZE", "BIND_INTERFACE_IP", "SERVER_PORT", "IMEX_NODE_CONFIG_FILE", "LOG_FILE_NAME",
		"IMEX_CMD_ENABLED", "IMEX_CMD_BIND_INTERFACE_IP", "IMEX_CMD_PORT",
	}
}

// ParseConfig reads and validates a config file as the fake nvidia-imex does: KEY=VALUE lines,
// '#' comments, only knownKeys, each at most once; DAEMONIZE=0 (the fake cannot daemonize),
// a node address in BIND_INTERFACE_IP, ports 1 to 65535, an absolute IMEX_NODE_CONFIG_FILE.
func ParseConfig(path string) (Config, error) {
	c := Config{Path: path}
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer func() { _ = f.Close() }()
	vals := map[string]string{}
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return c, fmt.Errorf("config %s line %d: %q is not KEY=VALUE", path, n, line)
		case !slices.Contains(knownKeys(), k):
			return c, fmt.Errorf("config %s line %d: unknown key %q (the fake knows %s)", path, n, k, strings.Join(knownKeys(), ", "))
		}
		if _, dup := vals[k]; dup {
			return c, fmt.Errorf("config %s line %d: %s set twice", path, n, k)
		}
		vals[k] = v
	}
	if err := s.Err(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, c.fill(vals)
}

// fill sets c from the parsed values and checks them.
func (c *Config) fill(vals map[string]string) error {
	var errs []error
	bad := func(k, want string) {
		errs = append(errs, fmt.Errorf("config %s: %s=%q: %s", c.Path, k, vals[k], want))
	}
	c.Daemonize = vals["DAEMONIZE"]
	if c.Daemonize != "0" {
		bad("DAEMONIZE", "must be 0 (the fake runs in the foreground only)")
	}
	var err error
	if c.BindIP, err = netip.ParseAddr(vals["BIND_INTERFACE_IP"]); err != nil || c.BindIP.IsUnspecified() {
		bad("BIND_INTERFACE_IP", "must be the node's address")
	}
	port := func(k string, dst *int, optional bool) {
		v, ok := vals[k]
		if !ok && optional {
			return
		}
		if *dst, err = strconv.Atoi(v); err != nil || *dst < 1 || *dst > 65535 {
			bad(k, "must be a port, 1 to 65535")
		}
	}
	port("SERVER_PORT", &c.ServerPort, false)
	c.NodesFile = vals["IMEX_NODE_CONFIG_FILE"]
	if !strings.HasPrefix(c.NodesFile, "/") {
		bad("IMEX_NODE_CONFIG_FILE", "must be an absolute path")
	}
	c.LogFile = vals["LOG_FILE_NAME"]
	c.CmdEnabled = vals["IMEX_CMD_ENABLED"] == "1"
	c.CmdBindIP = vals["IMEX_CMD_BIND_INTERFACE_IP"]
	port("IMEX_CMD_PORT", &c.CmdPort, !c.CmdEnabled)
	return errors.Join(errs...)
}

// ParseNodes reads a nodes file as the fake nvidia-imex does: one address a line, no
// duplicates, at least one, and self among them (nvidia-imex finds its own place in the list).
func ParseNodes(path string, self netip.Addr) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("nodes file: %w", err)
	}
	var nodes []string
	for n, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" && len(b) == 0 {
			break
		}
		a, err := netip.ParseAddr(line)
		if err != nil {
			return nil, fmt.Errorf("nodes file %s line %d: %q is not an IP address", path, n+1, line)
		}
		if slices.Contains(nodes, a.String()) {
			return nil, fmt.Errorf("nodes file %s line %d: %s appears twice", path, n+1, a)
		}
		nodes = append(nodes, a.String())
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("nodes file %s: no node", path)
	}
	if !slices.Contains(nodes, self.String()) {
		return nil, fmt.Errorf("nodes file %s: this node's BIND_INTERFACE_IP %s is not among %v", path, self, nodes)
	}
	return nodes, nil
}
