package imex

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpudra/gpudra/computedomain"
)

// Config is what one node's daemon of one domain needs to know.
type Config struct {
	// NodeName is this node's name: the key of its entry in the domain's status.
	NodeName string
	// PodIP is the daemon pod's address: nvidia-imex listens on it, and peers find it in the
	// status.
	PodIP netip.Addr
	// DomainUID is the ComputeDomain's UID.
	DomainUID types.UID
	// DomainName is the ComputeDomain's name.
	DomainName string
	// DomainNamespace is the ComputeDomain's namespace.
	DomainNamespace string
	// CliqueID is this node's NVLink clique, "<cluster UUID>.<clique ID>": only peers of this
	// clique go into the nodes file.
	CliqueID string
	// Dir is the daemon's directory (computedomain.DaemonConfigDir by default), prepared by
	// the node plugin.
	Dir string
	// DriverRoot is where nvidia-imex and nvidia-imex-ctl are ("/" by default).
	DriverRoot string
}

// ConfigFromEnv returns the Config that the environment describes (getenv is os.Getenv in the
// daemon container), with Dir computedomain.DaemonConfigDir and DriverRoot "/". Each missing or
// malformed variable is an error that names it; all of them are reported at once.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		NodeName: getenv(computedomain.EnvNodeName), DomainUID: types.UID(getenv(computedomain.EnvDomainUID)),
		DomainName: getenv(computedomain.EnvDomainName), DomainNamespace: getenv(computedomain.EnvDomainNamespace),
		CliqueID: getenv(computedomain.EnvCliqueID), Dir: computedomain.DaemonConfigDir, DriverRoot: "/",
	}
	var errs []error
	if ip := getenv(computedomain.EnvPodIP); ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not an IP address", computedomain.EnvPodIP, ip))
		}
		c.PodIP = a
	}
	if err := c.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("IMEX daemon environment: %w", err)
	}
	return c, nil
}

// Validate returns an error naming each field (by its environment variable) that is missing or
// malformed.
func (c Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("IMEX daemon config: %w", err)
	}
	return nil
}

func (c Config) validate() error {
	var errs []error
	check := func(name, value string, problems []string) {
		switch {
		case value == "":
			errs = append(errs, fmt.Errorf("%s: must be set", name))
		case len(problems) > 0:
			errs = append(errs, fmt.Errorf("%s=%q: %s", name, value, strings.Join(problems, "; ")))
		}
	}
	check(computedomain.EnvNodeName, c.NodeName, validation.IsDNS1123Subdomain(c.NodeName))
	check(computedomain.EnvDomainUID, string(c.DomainUID), uuidProblems(string(c.DomainUID)))
	check(computedomain.EnvDomainName, c.DomainName, validation.IsDNS1123Subdomain(c.DomainName))
	check(computedomain.EnvDomainNamespace, c.DomainNamespace, validation.IsDNS1123Label(c.DomainNamespace))
	check(computedomain.EnvCliqueID, c.CliqueID, cliqueProblems(c.CliqueID))
	switch {
	case !c.PodIP.IsValid():
		errs = append(errs, fmt.Errorf("%s: must be set to the pod's IP address", computedomain.EnvPodIP))
	case c.PodIP.IsUnspecified() || c.PodIP.IsLoopback():
		errs = append(errs, fmt.Errorf("%s=%q: must be an address peers can reach, not unspecified or loopback", computedomain.EnvPodIP, c.PodIP))
	}
	if err := checkDir(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("dir: %w", err))
	}
	return errors.Join(errs...)
}

// uuidProblems accepts an object UID (a UUID, as the API server assigns them).
func uuidProblems(s string) []string {
	if _, err := uuid.Parse(s); err != nil || len(s) != 36 {
		return []string{"must be the ComputeDomain's UID, a UUID like 0f8fad5b-d9cb-469f-a165-70867728950e"}
	}
	return nil
}

// cliqueProblems accepts "<cluster UUID>.<clique ID>", the clique ID a decimal uint32.
func cliqueProblems(s string) []string {
	cluster, clique, ok := strings.Cut(s, ".")
	if !ok || cluster == "" || strings.ContainsFunc(cluster, func(r rune) bool {
		return !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return []string{`must be "<cluster UUID>.<clique ID>"`}
	}
	if _, err := strconv.ParseUint(clique, 10, 32); err != nil {
		return []string{fmt.Sprintf("clique ID %q must be a decimal number below 2^32", clique)}
	}
	return nil
}
