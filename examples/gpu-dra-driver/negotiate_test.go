package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
)

// TestServeNegotiatesFeatures: serve asks the API server by default (--help says so), hands
// what it kept to the plugin, asks nothing with --negotiate-features=false, and names that flag
// when the server cannot be asked.
func TestServeNegotiatesFeatures(t *testing.T) {
	code, out, _ := runCLI(t, "serve", "--help")
	if code != 0 || !strings.Contains(out, "--negotiate-features") || !strings.Contains(out, "(default true)") {
		t.Errorf("serve --help (exit %d) does not list --negotiate-features, on by default:\n%s", code, out)
	}
	nf := nodeFlags{nvmlMode: "fake", machine: "dgx-a100-40gb", nodeName: "n1", dynamicMIG: true}
	n, err := nf.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	off := []gpudra.Feature{gpudra.FeaturePartitionableDevices}
	cases := []struct {
		args    []string
		want    []gpudra.Feature // dropped; nil features when not negotiated
		asked   bool
		notServ bool
	}{
		{args: nil, want: off, asked: true},
		{args: []string{"--negotiate-features=false"}, asked: false},
		{args: nil, asked: true, notServ: true},
	}
	for _, c := range cases {
		s, err := parseServeFlags(append([]string{"--node-name", "n1"}, c.args...))
		if err != nil {
			t.Fatal(err)
		}
		client := draplugintest.NewAPIClient(off)
		if c.notServ {
			client.Resources = nil
		}
		s.node.dynamicMIG = true
		f, err := s.negotiateFeatures(context.Background(), client, n)
		switch {
		case c.notServ:
			if err == nil || !strings.Contains(err.Error(), "--negotiate-features=false") {
				t.Errorf("%v: error %v, want one naming --negotiate-features=false", c.args, err)
			}
		case err != nil:
			t.Errorf("%v: %v", c.args, err)
		case !c.asked && f != nil:
			t.Errorf("%v: negotiated %+v, want nothing", c.args, f)
		case c.asked:
			if diff := cmp.Diff(c.want, f.Without()); diff != "" {
				t.Errorf("%v: dropped (-want +got):\n%s", c.args, diff)
			}
		}
		if asked := len(client.Actions()) > 0; asked != c.asked {
			t.Errorf("%v: API calls %v, want asked=%v", c.args, client.Actions(), c.asked)
		}
	}
}
