package imex_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/internal/atomicfile"
)

func TestRender(t *testing.T) {
	got, err := imex.IMEXConfig{Dir: "/imexd", BindIP: netip.MustParseAddr("192.168.7.4"), ServerPort: 51000}.Render()
	if err != nil {
		t.Fatal(err)
	}
	want := `# Written by the gpudra IMEX daemon; rewritten on every start.
DAEMONIZE=0
BIND_INTERFACE_IP=192.168.7.4
SERVER_PORT=51000
IMEX_NODE_CONFIG_FILE=/imexd/nodes_config.cfg
LOG_FILE_NAME=/imexd/nvidia-imex.log
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1
IMEX_CMD_PORT=50005
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

func TestIMEXConfigValidate(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name string
		c    imex.IMEXConfig
		want []string // substrings of the error; none: valid
	}{
		{name: "defaults", c: imex.IMEXConfig{Dir: "/imexd", BindIP: ip}},
		{name: "no dir", c: imex.IMEXConfig{BindIP: ip}, want: []string{"dir: must be set"}},
		{name: "relative dir", c: imex.IMEXConfig{Dir: "imexd", BindIP: ip}, want: []string{`dir: "imexd" must be a clean absolute path`}},
		{name: "unclean dir", c: imex.IMEXConfig{Dir: "/imexd/../etc", BindIP: ip}, want: []string{"must be a clean absolute path"}},
		{name: "line break in dir", c: imex.IMEXConfig{Dir: "/imexd\nDAEMONIZE=1", BindIP: ip}, want: []string{"must not hold a line break"}},
		{name: "no address", c: imex.IMEXConfig{Dir: "/imexd"}, want: []string{"bindIP"}},
		{name: "unspecified address", c: imex.IMEXConfig{Dir: "/imexd", BindIP: netip.IPv4Unspecified()}, want: []string{`bindIP "0.0.0.0"`}},
		{name: "port out of range", c: imex.IMEXConfig{Dir: "/imexd", BindIP: ip, ServerPort: 70000}, want: []string{"serverPort 70000: must be 1 to 65535"}},
		{name: "same ports", c: imex.IMEXConfig{Dir: "/imexd", BindIP: ip, ServerPort: 50005}, want: []string{"serverPort and commandPort are both 50005"}},
		{name: "every problem at once", c: imex.IMEXConfig{CommandPort: -1}, want: []string{"dir:", "bindIP", "commandPort -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to say %q", err, w)
				}
			}
			if _, rerr := tc.c.Render(); rerr == nil {
				t.Error("Render of an invalid config succeeded")
			}
		})
	}
}

func TestRenderNodes(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::1")
	for _, tc := range []struct {
		name    string
		peers   []netip.Addr
		want    string
		wantErr string
	}{
		{name: "in the given order", peers: []netip.Addr{b, a}, want: "fd00::1\n10.0.0.2\n"},
		{name: "none", want: ""},
		{name: "duplicate", peers: []netip.Addr{a, b, a}, wantErr: "peer 2: 10.0.0.2 appears twice"},
		{name: "invalid", peers: []netip.Addr{a, {}}, wantErr: "peer 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := imex.RenderNodes(tc.peers)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RenderNodes = %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("RenderNodes = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestWriteNodes: the file is replaced only when its content changes, and no temporary file
// stays behind.
func TestWriteNodes(t *testing.T) {
	c := imex.IMEXConfig{Dir: t.TempDir(), BindIP: selfIP}
	w := imex.NewWriter()
	peers := []netip.Addr{selfIP, netip.MustParseAddr("10.0.0.2")}
	for i, step := range []struct {
		peers       []netip.Addr
		wantChanged bool
	}{
		{peers: peers[:1], wantChanged: true}, // no file yet
		{peers: peers[:1], wantChanged: false},
		{peers: peers, wantChanged: true},
		{peers: peers, wantChanged: false},
	} {
		changed, err := w.WriteNodes(c, step.peers)
		if err != nil || changed != step.wantChanged {
			t.Errorf("step %d: WriteNodes = %v, %v; want changed %v", i, changed, err, step.wantChanged)
		}
	}
	if got := readFile(t, c.NodesPath()); got != "10.0.0.1\n10.0.0.2\n" {
		t.Errorf("nodes file = %q", got)
	}
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), atomicfile.TempPrefix) {
			t.Errorf("temporary file %s left behind", filepath.Join(c.Dir, e.Name()))
		}
	}
}
