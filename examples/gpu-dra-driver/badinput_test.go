package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
)

// The bad-input tables: what a new user types wrong, command by command. Each case asserts the
// exit status and the first line of stderr (a substring of it), and must end within caseLimit:
// no case may hang (/dev/zero, a 50 MB file, a FIFO) or panic.

const caseLimit = 10 * time.Second

// Workloads, configs and fixtures the cases name. Fixture paths are placeholders ({name})
// replaced by files badFixtures writes.
const (
	w01       = "../deploy/workloads/01-exclusive-gpu.yaml"
	migParted = "../deploy/mig-parted/config.yaml"
)

// badCase is one command line and its expected outcome.
type badCase struct {
	name  string
	args  []string
	stdin string
	code  int
	// first must be in the first line of stderr.
	first string
	// stdout, when set, must be in stdout (why the answer is no).
	stdout string
}

// badFixtures writes the files the cases name and returns placeholder → path.
func badFixtures(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"empty":         "",
		"comments":      "# nothing but a comment\n---\n",
		"binary":        "\x7fELF\x02\x01\x01\x00\x00\x00",
		"latin1":        "apiVersion: v1\nkind: Pod\nmetadata: {name: caf\xe9}\n",
		"notyaml":       "{[: this is not yaml\n",
		"claim-ok":      claimYAML("c", "", "count: 1"),
		"count-0":       claimYAML("c", "", "count: 0"),
		"count-neg":     claimYAML("c", "", "count: -3"),
		"count-33":      claimYAML("c", "", "count: 33"),
		"count-huge":    claimYAML("c", "", "count: 9223372036854775807"),
		"count-all":     claimYAML("c", "", "allocationMode: All, count: 2"),
		"mode-bad":      claimYAML("c", "", "allocationMode: Some"),
		"name-bad":      claimYAML("BAD_NAME", "", "count: 1"),
		"name-missing":  strings.Replace(claimYAML("c", "", "count: 1"), "metadata: {name: c}", "metadata: {}", 1),
		"ns-bad":        claimYAML("c", "BAD NS", "count: 1"),
		"unknown-kind":  "apiVersion: resource.k8s.io/v1\nkind: ResourceClam\nmetadata: {name: c}\n",
		"unknown-group": "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
		"v1beta1": "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n" +
			"    requests: [{name: gpu, deviceClassName: gpu.nvidia.com}]\n",
		"v1alpha3": "apiVersion: resource.k8s.io/v1alpha3\nkind: ResourceClaim\nmetadata: {name: c}\nspec:\n  devices:\n" +
			"    requests: [{name: gpu, deviceClassName: gpu.nvidia.com}]\n",
		"unknown-field": strings.Replace(claimYAML("c", "", "count: 1"), "spec:\n", "spec:\n  bogus: 1\n", 1),
		"case-field":    strings.Replace(claimYAML("c", "", "count: 1"), "  devices:", "  Devices:", 1),
		"no-apiversion": "kind: ResourceClaim\nmetadata: {name: c}\n",
		"no-kind":       "apiVersion: v1\nmetadata: {name: c}\n",
		"migcfg-on-gpu": claimYAML("c", "", "count: 1") + "    config: [{requests: [gpu], opaque: {driver: gpu.nvidia.com, " +
			"parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: MigDeviceConfig}}}]\n",
		"policy-ok":      "blockedMIGProfiles: ['7g.*']\n",
		"policy-case":    "blockedMigProfiles: ['7g.*']\n",
		"policy-typo":    "blockedMIGProfile: ['7g.*']\n",
		"policy-dup":     "blockedMIGProfiles: ['7g.*']\nblockedMIGProfiles: ['1g.*']\n",
		"policy-type":    "maxGPUsPerClaim: many\n",
		"policy-bad":     "blockedMIGProfiles: ['[']\n",
		"mig-ok":         "version: v1\nmig-configs:\n  one:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.5gb: 7}\n",
		"mig-typo":       "version: v1\nmig-configs:\n  one:\n  - devices: all\n    mig-enable: true\n",
		"mig-case":       "Version: v1\nmig-configs:\n  one:\n  - devices: all\n    mig-enabled: false\n",
		"mig-noversion":  "mig-configs:\n  one:\n  - devices: all\n    mig-enabled: false\n",
		"mig-v2":         "version: v2\nmig-configs:\n  one:\n  - devices: all\n    mig-enabled: false\n",
		"mig-two":        "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: false\n  b:\n  - devices: all\n    mig-enabled: false\n",
		"mig-toomany":    "version: v1\nmig-configs:\n  one:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.5gb: 8}\n",
		"mig-badprofile": "version: v1\nmig-configs:\n  one:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.6gb: 1}\n",
		"slices-pod":     "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
		"slices-typo":    "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {driverr: x}\n",
		"slices-none":    "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: c}\nspec: {}\n",
		"kubeconfig-bad": "this is not a kubeconfig: [\n",
		"kubeconfig-refused": "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
			"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
		"file": "a file where a directory should be\n",
	}
	out := map[string]string{}
	for name, data := range files {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	big := filepath.Join(dir, "big.yaml") // 50 MB of zeros, sparse
	f, err := os.Create(big)
	if err == nil {
		err = errors.Join(f.Truncate(50<<20), f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	out["big"] = big
	for _, d := range []string{"dir", "emptydir"} {
		out[d] = filepath.Join(dir, d)
		if err := os.Mkdir(out[d], 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(out["dir"], "a.yaml"), []byte(files["claim-ok"]), 0o600); err != nil {
		t.Fatal(err)
	}
	out["missing"] = filepath.Join(dir, "missing.yaml")
	out["fifo"] = filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(out["fifo"], 0o600); err != nil {
		t.Fatal(err)
	}
	out["under-file"] = filepath.Join(out["file"], "deep", "p")
	out["new"] = filepath.Join(dir, "new", "deep", "p") // serve must not create it
	return out
}

// claimYAML is a ResourceClaim with one exactly request of gpu.nvidia.com; exact holds the
// request's allocationMode and count fields.
func claimYAML(name, ns, exact string) string {
	meta := "{name: " + name + "}"
	if ns != "" {
		meta = fmt.Sprintf("{name: %s, namespace: %q}", name, ns)
	}
	return "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: " + meta + "\nspec:\n  devices:\n" +
		"    requests:\n    - name: gpu\n      exactly: {deviceClassName: gpu.nvidia.com, " + exact + "}\n"
}

// commandCases are the mistakes every command can be given, each for the commands that take
// the flag.
func commandCases() []badCase {
	type command struct {
		name string
		base []string
		// flags the command registers (others are no-ops there).
		machine, nvml, migConfig, nodeName, dynamicMIG bool
		outputs                                        string // allowed -o values, "" without -o
	}
	commands := []command{
		{name: "render", base: []string{"render"}, machine: true, nvml: true, migConfig: true, nodeName: true, dynamicMIG: true, outputs: "yaml, json"},
		{name: "inventory", base: []string{"inventory"}, machine: true, nvml: true, migConfig: true, outputs: "table, yaml, json"},
		{name: "topo", base: []string{"topo"}, machine: true, nvml: true, outputs: "table, json"},
		{name: "demo", base: []string{"demo"}, machine: true, migConfig: true, nodeName: true, dynamicMIG: true, outputs: "text, json"},
		{name: "check", base: []string{"check", w01}, machine: true, nvml: true, migConfig: true, nodeName: true, dynamicMIG: true, outputs: "table, json"},
		{name: "mig check-config", base: []string{"mig", "check-config", migParted}, machine: true, nvml: true},
		{name: "serve", base: []string{"serve", "--node-name", "n1", "--nvml=fake", "--kubeconfig", "{kubeconfig-refused}", "--plugin-dir", "{new}"},
			machine: true, nvml: true, migConfig: true, nodeName: true, dynamicMIG: true},
		{name: "mig profiles", base: []string{"mig", "profiles", "--gpu", "A100-SXM4-40GB"}},
		{name: "mig validate", base: []string{"mig", "validate", "--gpu", "A100-SXM4-40GB", "--profiles", "1g.5gb"}},
		{name: "mig layouts", base: []string{"mig", "layouts", "--gpu", "A30"}},
		{name: "version", base: []string{"version"}, outputs: "text, json"},
	}
	var out []badCase
	for _, c := range commands {
		add := func(name string, code int, first string, args ...string) {
			out = append(out, badCase{name: c.name + "/" + name, args: append(append([]string{}, c.base...), args...), code: code, first: first})
		}
		add("unknown flag", 2, "unknown flag: --bogus", "--bogus")
		add("unknown shorthand", 2, "unknown shorthand flag: 'z' in -z", "-z")
		if c.name != "check" && c.name != "mig check-config" {
			add("extra argument", 2, `takes no arguments, got "oops"`, "oops")
		}
		if c.outputs != "" {
			add("bad output", 2, `--output="xml": allowed values are `+c.outputs, "-o", "xml")
			add("empty output", 2, `--output="": allowed values are `+c.outputs, "--output=")
		}
		if c.machine {
			add("flag without value", 2, "flag needs an argument: --machine", "--machine")
			add("unknown machine", 2, `--machine="dgx-z": allowed values are dgx-a100-40gb`, "--machine", "dgx-z")
			add("empty machine", 2, `--machine="": allowed values are`, "--machine=")
			add("Go-style flag", 2, "long flags take two dashes: --machine", "-machine", "l4x8")
		}
		if c.nvml {
			add("bad nvml", 2, `--nvml="bogus": allowed values are fake, real`, "--nvml", "bogus")
		}
		if c.nodeName {
			add("bad node name", 2, "--node-name", "--node-name", "BAD NAME")
			add("long node name", 2, "--node-name", "--node-name", strings.Repeat("n", 254))
		}
		if c.dynamicMIG {
			add("bad bool", 2, `invalid argument "maybe" for "--dynamic-mig"`, "--dynamic-mig=maybe")
		}
		if c.migConfig {
			mc := func(name, first, value string) { add("mig-config "+name, 2, first, "--mig-config", value) }
			mc("dev zero", "/dev/zero: larger than the 1 MiB limit for this input", "/dev/zero")
			mc("50 MB", "big.yaml: larger than the 1 MiB limit for this input", "{big}")
			mc("binary", "binary data (a NUL byte at offset 7), not YAML or JSON", "{binary}")
			mc("latin1", "not UTF-8 text", "{latin1}")
			mc("not yaml", "--mig-config", "{notyaml}")
			mc("misspelled field", `unknown field "mig-configs.one[0].mig-enable"`, "{mig-typo}")
			mc("field in other case", `unknown field "Version"`, "{mig-case}")
			mc("no version", "missing required field version", "{mig-noversion}")
			mc("version v2", `unknown version "v2"`, "{mig-v2}")
			mc("two configs", "holds 2 configurations (a, b)", "{mig-two}")
			mc("empty file", "missing required field version", "{empty}")
			mc("directory", "is a directory", "{dir}")
			mc("missing file", "no such file or directory", "{missing}")
			mc("unknown name", `"nope" is neither a file nor a built-in mig-parted configuration`, "nope")
		}
	}
	return out
}

// specificCases are each command's own inputs: files, lists, names, counts.
func specificCases() []badCase {
	check := func(name string, code int, first string, args ...string) badCase {
		return badCase{name: "check/" + name, args: append([]string{"check"}, args...), code: code, first: first}
	}
	no := "check: the answer is no (see the report)"
	// checkNo is check's answer no (exit 1), for the reason why in its report.
	checkNo := func(name, why string, args ...string) badCase {
		c := check(name, 1, no, args...)
		c.stdout = why
		return c
	}
	cases := []badCase{
		// check: the manifests themselves.
		check("dev zero", 2, "/dev/zero: larger than the 16 MiB limit for this input", "/dev/zero"),
		check("50 MB file", 2, "big.yaml: larger than the 16 MiB limit for this input", "{big}"),
		check("binary file", 2, "binary data (a NUL byte at offset 7), not YAML or JSON", "{binary}"),
		check("latin1 file", 2, "not UTF-8 text (an invalid byte at offset", "{latin1}"),
		check("missing file", 2, "no such file or directory", "{missing}"),
		check("directory without yaml", 2, "no *.yaml or *.yml files", "{emptydir}"),
		// What is inside a readable text manifest is judged: not YAML is a finding, as is an unknown field.
		checkNo("not yaml", "[decode]", "{notyaml}"),
		checkNo("empty file", "[empty]", "{empty}"),
		checkNo("only comments", "[empty]", "{comments}"),
		check("count 0 is defaulted", 0, "", "{count-0}"),
		check("count 1", 0, "", "{claim-ok}"),
		check("directory", 0, "", "{dir}"),
		checkNo("negative count", "[invalid-request]", "{count-neg}"),
		checkNo("count 33", "an allocation holds at most 32 devices", "{count-33}"),
		checkNo("count max int64", "an allocation holds at most 32 devices", "{count-huge}"),
		checkNo("count with All", "[invalid-request]", "{count-all}"),
		checkNo("unknown allocation mode", "[invalid-request]", "{mode-bad}"),
		checkNo("invalid name", "[invalid-name]", "{name-bad}"),
		checkNo("missing name", "[invalid-name]", "{name-missing}"),
		checkNo("invalid namespace", "[invalid-name]", "{ns-bad}"),
		checkNo("unknown kind", "[unknown-kind]", "{unknown-kind}"),
		checkNo("unknown group", "[not-served]", "{unknown-group}"),
		checkNo("v1beta1 not served", "[not-served]", "{v1beta1}"),
		checkNo("v1alpha3 not served", "[not-served]", "{v1alpha3}"),
		check("v1beta1 served when declared", 0, "", "--api-versions", "resource.k8s.io/v1beta1", "{v1beta1}"),
		check("unknown group declared", 0, "", "--api-versions", "example.com/v1", "{unknown-group}"),
		checkNo("unknown field", "unknown field \"spec.bogus\"", "{unknown-field}"),
		checkNo("field in other case", "unknown field \"spec.Devices\"", "{case-field}"),
		checkNo("no apiVersion", "[not-served]", "{no-apiversion}"),
		checkNo("no kind", "[missing-kind]", "{no-kind}"),
		checkNo("MigDeviceConfig on a full GPU", "[invalid-config]", "{migcfg-on-gpu}"),
		check("bad api-versions", 2, `--api-versions: apiVersion "a/b/c": want GROUP/VERSION`, "--api-versions", "a/b/c", w01),
		check("empty api-version", 2, `--api-versions: apiVersion "": want GROUP/VERSION`, "--api-versions=,", w01),
		check("no api-versions", 0, "", "--api-versions=", w01),
		check("bad namespace flag", 2, `--namespace="BAD NS"`, "--namespace", "BAD NS", w01),
		check("empty namespace flag", 2, `--namespace=""`, "--namespace=", w01),
		check("print-upgraded binary", 2, "binary data", "--print-upgraded", "{binary}"),
		check("print-upgraded dev zero", 2, "larger than the 16 MiB limit", "--print-upgraded", "/dev/zero"),
		checkNo("stdin empty", "[empty]", "-"),
		{name: "check/stdin binary", args: []string{"check", "-"}, stdin: "\x00\x01", code: 2, first: "stdin: binary data (a NUL byte at offset 0)"},
		{name: "check/stdin too large", args: []string{"check", "-"}, stdin: strings.Repeat("#", 16<<20+1), code: 2, first: "stdin: larger than the 16 MiB limit"},
		{name: "check/stdin ok", args: []string{"check", "-"}, stdin: claimYAML("c", "", "count: 1"), code: 0},
		// check --policy.
		check("policy ok", 0, "", "--policy", "{policy-ok}", w01),
		check("policy dev zero", 2, "/dev/zero: larger than the 1 MiB limit", "--policy", "/dev/zero", w01),
		check("policy 50 MB", 2, "larger than the 1 MiB limit", "--policy", "{big}", w01),
		check("policy binary", 2, "binary data", "--policy", "{binary}", w01),
		check("policy missing", 2, "no such file or directory", "--policy", "{missing}", w01),
		check("policy directory", 2, "is a directory", "--policy", "{dir}", w01),
		check("policy field in other case", 2, `unknown field "blockedMigProfiles"`, "--policy", "{policy-case}", w01),
		check("policy misspelled field", 2, `unknown field "blockedMIGProfile"`, "--policy", "{policy-typo}", w01),
		check("policy duplicate key", 2, `key "blockedMIGProfiles" already set`, "--policy", "{policy-dup}", w01),
		check("policy wrong type", 2, "--policy", "--policy", "{policy-type}", w01),
		check("policy bad pattern", 2, "--policy", "--policy", "{policy-bad}", w01),
		check("policy not yaml", 2, "--policy", "--policy", "{notyaml}", w01),
		// check --slices.
		check("slices dev zero", 2, "/dev/zero: larger than the 64 MiB limit", "--slices", "/dev/zero", w01),
		check("slices binary", 2, "binary data", "--slices", "{binary}", w01),
		check("slices missing", 2, "no such file or directory", "--slices", "{missing}", w01),
		check("slices wrong kind", 2, `unexpected kind "Pod"`, "--slices", "{slices-pod}", w01),
		check("slices misspelled field", 2, `unknown field "spec.driverr"`, "--slices", "{slices-typo}", w01),
		check("slices without slices", 2, "no ResourceSlices", "--slices", "{slices-none}", w01),
		check("slices empty", 2, "no ResourceSlices", "--slices", "{empty}", w01),
		check("slices not yaml", 2, "--slices", "--slices", "{notyaml}", w01),
		// check --kubeconfig.
		check("kubeconfig missing", 2, "kubernetes client configuration: --kubeconfig", "--kubeconfig", "{missing}", w01),
		check("kubeconfig dev zero", 2, "not a regular file", "--kubeconfig", "/dev/zero", w01),
		check("kubeconfig 50 MB", 2, "larger than the 1 MiB limit", "--kubeconfig", "{big}", w01),
		check("kubeconfig not a kubeconfig", 2, "kubernetes client configuration: --kubeconfig", "--kubeconfig", "{kubeconfig-bad}", w01),
		check("kubeconfig directory", 2, "not a regular file", "--kubeconfig", "{dir}", w01),
		check("kubeconfig FIFO", 2, "not a regular file", "--kubeconfig", "{fifo}", w01),
		check("two machine sources", 2, "choose one machine", "--machine", "l4x8", "--slices", "{empty}", w01),
		check("no file", 2, "needs FILE|DIR|- ...", "--machine", "l4x8"),

		// mig validate: a wrong --profiles is a usage error, a layout that does not fit the answer no.
		caseMIGValidate("empty", 2, "--profiles is required", ""),
		caseMIGValidate("blank", 2, "--profiles is required", "  "),
		caseMIGValidate("comma", 2, "layout entry 1 is empty", ","),
		caseMIGValidate("trailing commas", 2, "layout entry 2 is empty", "1g.5gb,,"),
		caseMIGValidate("leading comma", 2, "layout entry 1 is empty", ",1g.5gb"),
		caseMIGValidate("garbage", 2, "--profiles=\"abc\": layout entry 1", "abc"),
		caseMIGValidate("zero slices", 2, "layout entry 1", "0g.5gb"),
		caseMIGValidate("placement not a number", 2, "placement \"x\" is not a memory-slice index", "1g.5gb@x"),
		caseMIGValidate("negative placement", 2, "placement \"-1\" is not a memory-slice index", "1g.5gb@-1"),
		caseMIGValidate("empty placement", 2, "placement \"\" is not a memory-slice index", "1g.5gb@"),
		caseMIGValidate("profile of another model", 1, `invalid: `, "2g.20gb"),
		caseMIGValidate("compute-instance profile", 1, "invalid: ", "1c.3g.20gb"),
		caseMIGValidate("too many", 1, "invalid: ", "1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb"),
		caseMIGValidate("overlap", 1, "invalid: ", "3g.20gb@0,3g.20gb@0"),
		caseMIGValidate("bad placement", 1, "invalid: ", "3g.20gb@1"),
		caseMIGValidate("no fit", 1, "invalid: ", "4g.20gb,4g.20gb"),
		caseMIGValidate("valid", 0, "", "3g.20gb,2g.10gb,1g.5gb"),
		{name: "mig validate/no gpu", args: []string{"mig", "validate", "--profiles", "1g.5gb"}, code: 2, first: "--gpu is required"},
		{name: "mig validate/unknown gpu", args: []string{"mig", "validate", "--gpu", "GTX 1080", "--profiles", "1g.5gb"}, code: 2, first: "--gpu: "},
		{name: "mig profiles/no gpu", args: []string{"mig", "profiles"}, code: 2, first: "--gpu is required"},
		{name: "mig profiles/unknown gpu", args: []string{"mig", "profiles", "--gpu", "nope"}, code: 2, first: "--gpu: "},
		// mig layouts --only: same rules as --profiles.
		caseMIGLayouts("trailing commas", 2, `--only="1g.6gb,,": item 2 is empty`, "1g.6gb,,"),
		caseMIGLayouts("comma", 2, `--only=",": item 1 is empty`, ","),
		caseMIGLayouts("unknown profile", 1, `--only="1g.5gb"`, "1g.5gb"),
		caseMIGLayouts("valid", 0, "", "1g.6gb,2g.12gb"),
		{name: "mig layouts/no gpu", args: []string{"mig", "layouts"}, code: 2, first: "--gpu is required"},
		// mig check-config: a file that is no mig-parted config is a usage error, as through --mig-config.
		caseCheckConfig("dev zero", 2, "/dev/zero: larger than the 1 MiB limit", "/dev/zero"),
		caseCheckConfig("50 MB", 2, "larger than the 1 MiB limit", "{big}"),
		caseCheckConfig("binary", 2, "binary data", "{binary}"),
		caseCheckConfig("not yaml", 2, "not a mig-parted config", "{notyaml}"),
		caseCheckConfig("empty", 2, `not a mig-parted config: version is "", want "v1"`, "{empty}"),
		caseCheckConfig("misspelled field", 2, "not a mig-parted config: unknown field", "{mig-typo}"),
		caseCheckConfig("field in other case", 2, `not a mig-parted config: unknown field "Version"`, "{mig-case}"),
		caseCheckConfig("no version", 2, `version is "", want "v1"`, "{mig-noversion}"),
		caseCheckConfig("version v2", 2, `version is "v2", want "v1"`, "{mig-v2}"),
		caseCheckConfig("directory", 2, "is a directory", "{dir}"),
		caseCheckConfig("missing", 2, "no such file or directory", "{missing}"),
		// The reason is printed with the verdict, on stdout; stderr names the invalid configurations.
		withStdout(caseCheckConfig("too many instances", 1, `invalid on dgx-a100-40gb: "one"`, "{mig-toomany}"), `reason: mig config "one"`),
		withStdout(caseCheckConfig("profile of another model", 1, `invalid on dgx-a100-40gb: "one"`, "{mig-badprofile}"),
			`reason: mig config "one", devices 0-7 (A100-SXM4-40GB): profile "1g.6gb" is not a MIG profile of A100-SXM4-40GB`),
		caseCheckConfig("valid", 0, "", "{mig-ok}"),
		{name: "mig check-config/unknown config", args: []string{"mig", "check-config", "{mig-two}", "--config", "c"}, code: 2, first: `--config="c": `},
		{name: "mig check-config/no file", args: []string{"mig", "check-config"}, code: 2, first: "needs FILE"},
		{name: "mig check-config/two files", args: []string{"mig", "check-config", "{mig-ok}", "{mig-ok}"}, code: 2, first: "extra arguments"},
		{name: "mig/unknown subcommand", args: []string{"mig", "valdate"}, code: 2, first: `unknown command "valdate"`},
		{name: "mig/no subcommand", args: []string{"mig"}, code: 2, first: "needs a subcommand"},

		// demo --workloads.
		caseDemo("duplicate workload", 2, `"01-exclusive-gpu.yaml" is listed twice`, "01-exclusive-gpu.yaml,01-exclusive-gpu.yaml"),
		caseDemo("empty item", 2, `item 2 is empty`, "01-exclusive-gpu.yaml,,"),
		caseDemo("only commas", 2, `item 1 is empty`, ",,"),
		caseDemo("empty", 2, "--workloads is empty", ""),
		caseDemo("unknown workload", 2, `"nope.yaml" is not a file of examples/deploy/workloads`, "nope.yaml"),
		caseDemo("path", 2, "is not a file of examples/deploy/workloads", "../../go.mod"),
		{name: "demo/real nvml", args: []string{"demo", "--nvml=real"}, code: 2, first: "--nvml=real: the demo runs on a fake machine only"},

		// topo --best.
		{name: "topo/best 0", args: []string{"topo", "--best", "0"}, code: 2, first: "--best=0: want a number of GPUs, at least 1"},
		{name: "topo/best negative", args: []string{"topo", "--best", "-1"}, code: 2, first: "--best=-1"},
		{name: "topo/best not a number", args: []string{"topo", "--best", "four"}, code: 2, first: `invalid argument "four"`},
		{name: "topo/best too many", args: []string{"topo", "--best", "9"}, code: 2, first: "--best=9"},

		// serve: every flag and the environment before anything is created.
		caseServe("no node name", 2, "--node-name (or $NODE_NAME) is required", "--node-name="),
		caseServe("kubeconfig missing", 2, "kubernetes client configuration: --kubeconfig", "--kubeconfig", "{missing}"),
		caseServe("kubeconfig dev zero", 2, "not a regular file", "--kubeconfig", "/dev/zero"),
		caseServe("kubeconfig 50 MB", 2, "larger than the 1 MiB limit", "--kubeconfig", "{big}"),
		caseServe("kubeconfig garbage", 2, "kubernetes client configuration: --kubeconfig", "--kubeconfig", "{kubeconfig-bad}"),
		caseServe("relative plugin dir", 2, `--plugin-dir="p": must be an absolute path`, "--plugin-dir", "p"),
		caseServe("plugin dir under a file", 2, "not a directory", "--plugin-dir", "{under-file}"),
		caseServe("cdi root under a file", 2, "not a directory", "--cdi-root", "{under-file}"),
		caseServe("state dir under a file", 2, "not a directory", "--state-dir", "{under-file}"),
		caseServe("registrar dir under a file", 2, "not a directory", "--registrar-dir", "{under-file}"),
		caseServe("zero qps", 2, "both must be positive numbers", "--kube-api-qps", "0"),
		caseServe("NaN qps", 2, "both must be positive numbers", "--kube-api-qps", "NaN"),
		caseServe("negative burst", 2, "both must be positive numbers", "--kube-api-burst", "-1"),
		caseServe("bad metrics addr", 2, `--metrics-addr="8080"`, "--metrics-addr", "8080"),
		caseServe("bad taint effect", 2, `--health-taint-effect="Evict"`, "--health-taint-effect", "Evict"),
		caseServe("bad strategy", 2, "--sharing-strategies", "--sharing-strategies", "Magic"),
		caseServe("fake control not loopback", 2, "--fake-control", "--fake-control", "0.0.0.0:1"),
		caseServe("machine without fake", 2, "--machine needs --nvml=fake", "--nvml=real", "--machine", "l4x8"),
		{name: "serve/relative proc root", args: []string{"serve", "--node-name", "n1", "--kubeconfig", "{kubeconfig-refused}", "--plugin-dir", "{new}", "--proc-root", "host"},
			code: 2, first: `--proc-root="host": must be an absolute path`},
		caseServe("API server refuses connections", 3, "API server: ", "--cdi-root", "{new}", "--registrar-dir", "{new}"),

		// completion.
		{name: "completion/no shell", args: []string{"completion"}, code: 2, first: "needs SHELL: one of bash, fish, powershell, zsh"},
		{name: "completion/unknown shell", args: []string{"completion", "tcsh"}, code: 2, first: `unknown command "tcsh"`},
		{name: "completion/bash", args: []string{"completion", "bash"}, code: 0},
		// The root command.
		{name: "root/no command", args: nil, code: 2, first: "a command is required"},
		{name: "root/unknown command", args: []string{"rendr"}, code: 2, first: `unknown command "rendr" (did you mean render?)`},
	}
	return cases
}

func caseMIGValidate(name string, code int, first, profiles string) badCase {
	return badCase{name: "mig validate/" + name, args: []string{"mig", "validate", "--gpu", "A100-SXM4-40GB", "--profiles", profiles}, code: code, first: first}
}

func caseMIGLayouts(name string, code int, first, only string) badCase {
	return badCase{name: "mig layouts/" + name, args: []string{"mig", "layouts", "--gpu", "A30", "--only", only}, code: code, first: first}
}

func caseCheckConfig(name string, code int, first, file string) badCase {
	return badCase{name: "mig check-config/" + name, args: []string{"mig", "check-config", "--machine", "dgx-a100-40gb", file}, code: code, first: first}
}

func withStdout(c badCase, stdout string) badCase {
	c.stdout = stdout
	return c
}

func caseDemo(name string, code int, first, workloads string) badCase {
	return badCase{name: "demo/" + name, args: []string{"demo", "--workloads", workloads}, code: code, first: first}
}

func caseServe(name string, code int, first string, args ...string) badCase {
	base := []string{"serve", "--node-name", "n1", "--nvml=fake", "--machine", "l4x8", "--kubeconfig", "{kubeconfig-refused}", "--plugin-dir", "{new}"}
	return badCase{name: "serve/" + name, args: append(base, args...), code: code, first: first}
}

// expand replaces the {fixture} placeholders of args.
func expand(args []string, fx map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.HasPrefix(a, "{") && strings.HasSuffix(a, "}") {
			p, ok := fx[strings.Trim(a, "{}")]
			if !ok {
				panic("no fixture " + a)
			}
			out[i] = p
		}
	}
	return out
}

// badResult is what a case checks.
type badResult struct {
	Code      int
	FirstLine string
}

// TestBadInput runs every case in process: exit status, the first line of stderr, no panic, and
// within caseLimit.
func TestBadInput(t *testing.T) {
	fx := badFixtures(t)
	cases := append(commandCases(), specificCases()...)
	if len(cases) < 200 {
		t.Errorf("%d cases, want at least 200", len(cases))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Errorf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			args := expand(c.args, fx)
			ctx, cancel := context.WithTimeout(context.Background(), caseLimit)
			defer cancel()
			var stdout, stderr bytes.Buffer
			start := time.Now()
			code := runIO(ctx, args, strings.NewReader(c.stdin), &stdout, &stderr)
			if d := time.Since(start); d > caseLimit {
				t.Errorf("took %v, more than %v", d, caseLimit)
			}
			first, _, _ := strings.Cut(stderr.String(), "\n")
			got := badResult{Code: code, FirstLine: first}
			want := badResult{Code: c.code, FirstLine: first}
			if c.first != "" && !strings.Contains(first, c.first) {
				want.FirstLine = "… " + c.first + " …"
			}
			if c.code == 0 && c.first == "" && strings.HasPrefix(first, "gpu-dra-driver") {
				want.FirstLine = "(no error)"
			}
			if c.stdout != "" && !strings.Contains(stdout.String(), c.stdout) {
				t.Errorf("%q: the report does not say %q:\n%.2000s", args, c.stdout, stdout.String())
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%q (-want +got):\n%s\nstdout:\n%.2000s\nstderr:\n%.2000s", args, diff, stdout.String(), stderr.String())
			}
		})
	}
	if _, err := os.Stat(fx["new"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve created %s before it failed (stat: %v)", fx["new"], err)
	}
}

// TestMain lets the signal tests run this test binary as the command.
func TestMain(m *testing.M) {
	if os.Getenv(cliEnv) == "1" {
		logCLIRun()
		main()
		return
	}
	if os.Getenv("GPU_DRA_DRIVER_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestSignalStopsEveryRead: a command blocked on a FIFO no one writes, or on a stdin that never
// ends, stops within a second of SIGTERM or SIGINT, with exit status 3 and "interrupted".
func TestSignalStopsEveryRead(t *testing.T) {
	cases := []struct {
		name string
		args []string // "{fifo}" is a FIFO of the case's own
		sig  syscall.Signal
	}{
		{"check FIFO", []string{"check", "{fifo}"}, syscall.SIGTERM},
		{"check stdin", []string{"check", "-"}, syscall.SIGTERM},
		{"check --policy FIFO", []string{"check", "--policy", "{fifo}", w01}, syscall.SIGTERM},
		{"check --slices FIFO", []string{"check", "--slices", "{fifo}", w01}, syscall.SIGINT},
		{"mig check-config FIFO", []string{"mig", "check-config", "{fifo}"}, syscall.SIGTERM},
		{"render --mig-config FIFO", []string{"render", "--mig-config", "{fifo}"}, syscall.SIGINT},
		{"inventory --mig-config FIFO", []string{"inventory", "--mig-config", "{fifo}"}, syscall.SIGTERM},
		{"serve --mig-config FIFO", []string{"serve", "--node-name", "n1", "--nvml=fake", "--mig-config", "{fifo}"}, syscall.SIGTERM},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fifo := filepath.Join(t.TempDir(), "fifo.yaml")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			cmd := exec.Command(os.Args[0], expand(c.args, map[string]string{"fifo": fifo})...)
			cmd.Env = append(os.Environ(), "GPU_DRA_DRIVER_RUN_MAIN=1")
			stdin, err := cmd.StdinPipe() // never written, never closed until the end
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = io.Discard, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(c.args, "{fifo}") {
				defer awaitReader(t, fifo).Close()
				time.Sleep(200 * time.Millisecond) // from open(2) into read(2)
			} else {
				time.Sleep(2 * time.Second) // no way to see a read of stdin begin: time enough to start
			}
			sent := time.Now()
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(caseLimit):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("still running %v after %v; stderr: %s", caseLimit, c.sig, stderr.String())
			}
			took := time.Since(sent)
			first, _, _ := strings.Cut(stderr.String(), "\n")
			got := badResult{Code: cmd.ProcessState.ExitCode(), FirstLine: first}
			want := badResult{Code: exitFailure, FirstLine: first}
			// The command's own message, not main's backstop for commands that ignore the signal.
			if !strings.Contains(first, "interrupted") || strings.Contains(first, "not stopped within") {
				want.FirstLine = "gpu-dra-driver COMMAND: … interrupted …"
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if took > time.Second {
				t.Errorf("stopped %v after %v, want within a second", took, c.sig)
			}
		})
	}
}

// TestEveryHelpStatesTheExitCodes: every command's --help ends with the one exit status table,
// and README's table gives each code the same meaning.
func TestEveryHelpStatesTheExitCodes(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			p := append(append([]string{}, path...), sub.Name())
			paths = append(paths, p)
			walk(sub, p)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard), nil)
	if len(paths) < 15 {
		t.Fatalf("found %d commands: %v", len(paths), paths)
	}
	for _, p := range paths {
		if p[0] == "help" || p[0] == "__complete" || p[0] == "__completeNoDesc" {
			continue
		}
		code, out, errOut := runCLI(t, append(p, "--help")...)
		if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), strings.TrimSpace(exitCodesHelp)) &&
			!strings.Contains(out, exitCodesHelp+"\n") {
			t.Errorf("%s --help: exit %d, the help does not state the exit codes:\n%s%s", strings.Join(p, " "), code, out, errOut)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for code, meaning := range []string{"success", `the answer is "no"`, "usage error", "runtime failure"} {
		row := fmt.Sprintf("| %d | %s", code, meaning)
		if !strings.Contains(string(readme), row) || !strings.Contains(exitCodesHelp, fmt.Sprintf("%d  %s", code, meaning)) {
			t.Errorf("README (%q) and --help disagree on exit code %d", row, code)
		}
	}
}

// awaitReader waits until a process has the FIFO open for reading (the command reached its
// read, after its signal handling was set up) and returns the write end, kept open so that the
// reader blocks in read(2) for data that never comes.
func awaitReader(t *testing.T, fifo string) *os.File {
	t.Helper()
	deadline := time.Now().Add(caseLimit)
	for {
		// O_NONBLOCK write opens fail with ENXIO until a reader has the FIFO open.
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			return f
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("no reader opened %s: %v", fifo, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
