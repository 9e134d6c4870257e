package durability

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/checkpoint"
)

// What each write of a plugin must survive, and so what it pays for (docs/reliability.md,
// "Durability"). A power loss is a reboot, after which kubelet prepares again the claims of the
// pods it restarts and unprepares those of pods that are gone, and reconciliation drops every
// claim of the earlier boot: no write on the path of a prepare or an unprepare needs an fsync.
const (
	// StepDurability is for the records prepare and unprepare make on their way and for CDI
	// specs: they must survive a crash of the process, which the rename gives for free.
	StepDurability = atomicfile.ProcessCrash
	// ReconcileDurability is for what reconciliation changes: after a power loss it draws the
	// same conclusions from the same evidence again.
	ReconcileDurability = atomicfile.ProcessCrash
)

// hookSyncer is the operating system's fsync followed by a hook.
type hookSyncer struct {
	atomicfile.OSSyncer
	synced func(path string)
}

var _ atomicfile.Syncer = hookSyncer{}

// SyncFile implements atomicfile.Syncer.
func (h hookSyncer) SyncFile(f *os.File) error {
	if err := h.OSSyncer.SyncFile(f); err != nil {
		return err
	}
	h.synced(f.Name())
	return nil
}

// SyncDir implements atomicfile.Syncer.
func (h hookSyncer) SyncDir(dir string) error {
	if err := h.OSSyncer.SyncDir(dir); err != nil {
		return err
	}
	h.synced(dir)
	return nil
}

// Syncer is the operating system's fsync, reported to synced (a test hook) when it is not nil.
func Syncer(synced func(path string)) atomicfile.Syncer {
	if synced == nil {
		return atomicfile.OSSyncer{}
	}
	return hookSyncer{synced: synced}
}

// StoreConfig configures OpenStore.
type StoreConfig struct {
	// Dir is the state directory.
	Dir string
	// BootIDPath is where the kernel boot ID is read; empty means the checkpoint's default.
	BootIDPath string
	// Now is the clock.
	Now func() time.Time
	// Synced is the test hook told of every fsync; nil for none.
	Synced func(path string)
	// BeforeWrite is the test hook called before every checkpoint write; an error fails that
	// write, as a full disk would. Nil for none.
	BeforeWrite func(path string) error
}

// OpenStore opens the checkpoint in the state directory with the plugin's logger, clock and
// syncer.
func OpenStore(ctx context.Context, c StoreConfig) (*checkpoint.Store, checkpoint.LoadReport, error) {
	opts := []checkpoint.Option{checkpoint.WithLogger(klog.FromContext(ctx)), checkpoint.WithClock(c.Now),
		checkpoint.WithSyncer(Syncer(c.Synced))}
	if c.BootIDPath != "" {
		opts = append(opts, checkpoint.WithBootIDPath(c.BootIDPath))
	}
	if c.BeforeWrite != nil {
		files := atomicfile.New(atomicfile.WithSyncer(Syncer(c.Synced)))
		opts = append(opts, checkpoint.WithWriteFunc(func(path string, data []byte, perm fs.FileMode, d atomicfile.Durability) error {
			if err := c.BeforeWrite(path); err != nil {
				return err
			}
			return files.Write(path, data, perm, d)
		}))
	}
	store, rep, err := checkpoint.Open(c.Dir, opts...)
	if err != nil {
		return nil, rep, fmt.Errorf("open checkpoint: %w", err)
	}
	return store, rep, nil
}
