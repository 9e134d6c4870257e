package serving_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/serving"
)

// TestCheckSocketPaths: a registrar directory whose rolling-update socket path comes to exactly
// 108 bytes is refused before anything is created (the helper would pick that name, and it
// cannot be bound: the test binds it to show so), as is a plugin directory whose DRA socket
// path is too long; paths of 107 bytes and less pass.
func TestCheckSocketPaths(t *testing.T) {
	const driver = "gpu.nvidia.com"
	uid := types.UID("22d5ec3a-8c7e-47a4-b0c6-a77f46926a7d")
	base := t.TempDir()
	// dirOf returns a directory below base whose rolling-update registration socket path (the
	// helper's first choice, <driver>-<uid>-reg.sock) is n bytes long.
	dirOf := func(n int) string {
		name := driver + "-" + string(uid) + "-reg.sock"
		pad := n - len(base) - 2 - len(name) // two slashes
		if pad < 1 {
			t.Fatalf("temporary directory %s too long for a %d-byte path", base, n)
		}
		return filepath.Join(base, strings.Repeat("d", pad))
	}
	for _, tc := range []struct {
		name    string
		e       serving.Endpoint
		wantErr string
	}{
		{"107 bytes", serving.Endpoint{DriverName: driver, RegistrarDir: dirOf(107), PluginDir: base, RollingUpdatePodUID: uid}, ""},
		{"108 bytes", serving.Endpoint{DriverName: driver, RegistrarDir: dirOf(108), PluginDir: base, RollingUpdatePodUID: uid}, "registration socket"},
		{"109 bytes: the helper shortens the name", serving.Endpoint{DriverName: driver, RegistrarDir: dirOf(109), PluginDir: base, RollingUpdatePodUID: uid}, ""},
		{"no rolling update", serving.Endpoint{DriverName: driver, RegistrarDir: dirOf(108), PluginDir: base}, ""},
		{"DRA socket", serving.Endpoint{DriverName: driver, RegistrarDir: base, PluginDir: filepath.Join(base, strings.Repeat("p", 100)), RollingUpdatePodUID: uid}, "DRA socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := serving.CheckSocketPaths(tc.e)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("CheckSocketPaths = %v, want an error about %q", err, tc.wantErr)
			}
			if tc.e.RollingUpdatePodUID == "" || tc.wantErr == "DRA socket" {
				return
			}
			// What the helper would do: bind the name it picks.
			dir := tc.e.RegistrarDir
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, kubeletplugin.RollingUpdateRegistrarSocketFile(dir, driver, uid))
			l, bindErr := net.Listen("unix", p)
			if bindErr == nil {
				_ = l.Close()
			}
			if (bindErr == nil) != (err == nil) {
				t.Errorf("binding %s (%d bytes): %v; CheckSocketPaths: %v — they must agree", p, len(p), bindErr, err)
			}
		})
	}
}
