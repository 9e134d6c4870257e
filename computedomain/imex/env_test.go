package imex_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/imex"
)

func TestConfigFromEnv(t *testing.T) {
	good := map[string]string{
		"NODE_NAME":                "gb200-rack1-node07",
		"POD_IP":                   "10.244.3.17",
		"COMPUTE_DOMAIN_UUID":      string(domainUID),
		"COMPUTE_DOMAIN_NAME":      "train",
		"COMPUTE_DOMAIN_NAMESPACE": "team",
		"COMPUTE_DOMAIN_CLIQUE":    clique,
	}
	with := func(k, v string) map[string]string {
		env := map[string]string{}
		for k, v := range good {
			env[k] = v
		}
		env[k] = v
		return env
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // substrings of the error; none: valid
	}{
		{name: "valid", env: good},
		{name: "IPv6 pod", env: with("POD_IP", "fd00:10:244::17")},
		{name: "nothing set", env: map[string]string{}, want: []string{
			"NODE_NAME: must be set", "POD_IP: must be set", "COMPUTE_DOMAIN_UUID: must be set", "COMPUTE_DOMAIN_NAME: must be set",
			"COMPUTE_DOMAIN_NAMESPACE: must be set", "COMPUTE_DOMAIN_CLIQUE: must be set",
		}},
		{name: "node name", env: with("NODE_NAME", "Node_7"), want: []string{`NODE_NAME="Node_7": a lowercase RFC 1123 subdomain`}},
		{name: "pod IP", env: with("POD_IP", "10.244.3"), want: []string{`POD_IP="10.244.3": not an IP address`}},
		{name: "loopback pod IP", env: with("POD_IP", "127.0.0.1"), want: []string{`POD_IP="127.0.0.1": must be an address peers can reach`}},
		{name: "uid", env: with("COMPUTE_DOMAIN_UUID", "train"), want: []string{`COMPUTE_DOMAIN_UUID="train": must be the ComputeDomain's UID`}},
		{name: "name", env: with("COMPUTE_DOMAIN_NAME", "Train!"), want: []string{`COMPUTE_DOMAIN_NAME="Train!"`}},
		{name: "namespace", env: with("COMPUTE_DOMAIN_NAMESPACE", "team.a"), want: []string{`COMPUTE_DOMAIN_NAMESPACE="team.a": must not contain dots`}},
		{name: "clique without clique ID", env: with("COMPUTE_DOMAIN_CLIQUE", "5e1c4f2a"), want: []string{`COMPUTE_DOMAIN_CLIQUE="5e1c4f2a": must be "<cluster UUID>.<clique ID>"`}},
		{name: "clique ID not a number", env: with("COMPUTE_DOMAIN_CLIQUE", "5e1c4f2a.x"), want: []string{`clique ID "x" must be a decimal number`}},
		{name: "clique with a space", env: with("COMPUTE_DOMAIN_CLIQUE", "5e1c 4f2a.3"), want: []string{`must be "<cluster UUID>.<clique ID>"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := imex.ConfigFromEnv(func(k string) string { return tc.env[k] })
			if len(tc.want) > 0 {
				for _, w := range tc.want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("ConfigFromEnv = %v, want it to say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ConfigFromEnv: %v", err)
			}
			want := imex.Config{
				NodeName: tc.env["NODE_NAME"], PodIP: netip.MustParseAddr(tc.env["POD_IP"]), DomainUID: domainUID,
				DomainName: "train", DomainNamespace: "team", CliqueID: clique, Dir: computedomain.DaemonConfigDir, DriverRoot: "/",
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("ConfigFromEnv (-want +got):\n%s", diff)
			}
		})
	}
}
