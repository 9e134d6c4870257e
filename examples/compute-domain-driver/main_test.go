package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUsageErrors: a wrong command line exits 2 and names what is wrong, before anything runs.
func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown command", []string{"serve"}, nil, `unknown command "serve"`},
		{"unknown flag", []string{"plugin", "--bogus"}, nil, "unknown flag: --bogus"},
		{"bad nvml mode", []string{"plugin", "--nvml=maybe", "--node-name=n"}, nil, `--nvml "maybe": want real or fake`},
		// klog's -v is taken (the chart passes it): the error is the next flag's.
		{"verbosity then bad nvml mode", []string{"plugin", "-v=4", "--nvml=maybe", "--node-name=n"}, nil, `--nvml "maybe": want real or fake`},
		{"verbosity of the controller", []string{"controller", "--v=2", "--namespace="}, nil, "--namespace (or $POD_NAMESPACE) is required"},
		{"verbosity not a number", []string{"daemon", "-v=loud"}, nil, `invalid argument "loud"`},
		{"fake clique without fake nvml", []string{"plugin", "--fake-clique=none", "--node-name=n"}, nil, "--fake-clique needs --nvml=fake"},
		{"bad fake clique", []string{"plugin", "--nvml=fake", "--fake-clique=abc", "--node-name=n"}, nil, `--fake-clique "abc"`},
		{"controller without namespace", []string{"controller", "--namespace="}, nil, "--namespace (or $POD_NAMESPACE) is required"},
		{"controller without image", []string{"controller", "--namespace=ns"}, nil, "--daemon-image is required"},
		{"daemon without environment", []string{"daemon"}, map[string]string{"NODE_NAME": "", "POD_IP": ""}, "NODE_NAME"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			if code := run(context.Background(), tt.args, &out, &errOut); code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("stderr %q, want it to contain %q", errOut.String(), tt.want)
			}
		})
	}
}
