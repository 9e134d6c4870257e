package sharing_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/sharing"
)

// TestCheckMPSRoot: an MPS root is accepted exactly when the longest control socket below it
// (<root>/<claim UID>/pipe/control) can be bound; the test binds it at 107 and 108 bytes to show
// where the limit is, and the check must agree.
func TestCheckMPSRoot(t *testing.T) {
	base := t.TempDir()
	uid := "0b7c5c1e-7d6b-4a52-9d0e-3f1b2c4d5e6f"
	for _, total := range []int{100, 107, 108, 120} {
		pad := total - len(base) - len("/"+uid+"/pipe/control") - 1
		if pad < 1 {
			t.Fatalf("temporary directory %s too long", base)
		}
		root := filepath.Join(base, strings.Repeat("r", pad))
		sock := filepath.Join(root, uid, "pipe", "control")
		if len(sock) != total {
			t.Fatalf("built a %d-byte path, want %d", len(sock), total)
		}
		if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
			t.Fatal(err)
		}
		l, bindErr := net.Listen("unix", sock)
		if bindErr == nil {
			_ = l.Close()
		}
		err := sharing.CheckMPSRoot(root)
		if (err == nil) != (bindErr == nil) {
			t.Errorf("%d bytes: binding the control socket: %v; CheckMPSRoot: %v — they must agree", total, bindErr, err)
		}
		if err != nil && !strings.Contains(err.Error(), root) {
			t.Errorf("%d bytes: error %q does not name the root", total, err)
		}
	}
}
