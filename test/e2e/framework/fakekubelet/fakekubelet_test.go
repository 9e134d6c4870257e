package fakekubelet

import (
	"errors"
	"testing"

	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestPrepareErrors(t *testing.T) {
	a, b := Claim{"ns", "a", "uid-a"}, Claim{"ns", "b", "uid-b"}
	cases := []struct {
		name string
		resp *drapbv1.NodePrepareResourcesResponse
		err  error
		want string
	}{
		{"ok", &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{"uid-a": {}, "uid-b": {}}}, nil, ""},
		{"call failed", nil, errors.New("boom"), "NodePrepareResources: boom"},
		{"claim missing", &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{"uid-a": {}}}, nil, "claim ns/b: missing from the response"},
		{"claim failed", &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{"uid-a": {Error: "bad"}, "uid-b": {}}}, nil, "claim ns/a: bad"},
	}
	for _, c := range cases {
		got := ""
		if err := PrepareErrors(c.resp, c.err, a, b); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestValidateInfo(t *testing.T) {
	good := &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "d", Endpoint: "/x/dra.sock", SupportedVersions: []string{drapbv1.DRAPluginService}}
	if err := validateInfo(good); err != nil {
		t.Errorf("valid info refused: %v", err)
	}
	for name, info := range map[string]*registerapi.PluginInfo{
		"CSI plugin":  {Type: registerapi.CSIPlugin, Name: "d", Endpoint: "/x", SupportedVersions: good.SupportedVersions},
		"no v1":       {Type: registerapi.DRAPlugin, Name: "d", Endpoint: "/x", SupportedVersions: []string{"v1beta1.DRAPlugin"}},
		"no endpoint": {Type: registerapi.DRAPlugin, Name: "d", SupportedVersions: good.SupportedVersions},
	} {
		if err := validateInfo(info); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
