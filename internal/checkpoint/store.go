package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/filelock"
	"github.com/gpudra/gpudra/internal/input"
)

const (
	// FileName is the name of the checkpoint file inside the store directory.
	FileName = "checkpoint.json"
	// LockFileName is the lock file that serializes every read-modify-write of the checkpoint
	// across processes (two plugin pods during a rolling update).
	LockFileName = "checkpoint.lock"
	// FileMode is the mode of the checkpoint file.
	FileMode fs.FileMode = 0o600
	// DirMode is the mode Open gives the store directory.
	DirMode fs.FileMode = 0o700
	// DefaultBootIDPath is where Linux exposes the current boot ID.
	DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"
	// DefaultMaxCorrupt is how many moved-aside corrupt checkpoints Open keeps by default.
	DefaultMaxCorrupt = 5
	// DefaultMaxSize bounds the checkpoint the store reads and writes: 64 MiB, some 60,000
	// claims at about 1 KiB each, far more than one node holds. A read stops at the limit (a
	// checkpoint replaced by a link to /dev/zero cannot exhaust memory), and an update that
	// would write more fails, so the store never writes what a restart could not read back.
	DefaultMaxSize int64 = 64 << 20

	corruptInfix = ".corrupt-"
	// corruptTimeFormat is fixed-width so that names sort in time order.
	corruptTimeFormat = "20060102T150405.000000000Z"
)

// WriteFunc atomically replaces path with data created with mode perm, as durable as d says.
// The default is the Write of the store's atomicfile.Files; tests replace it to inject failures.
type WriteFunc func(path string, data []byte, perm fs.FileMode, d atomicfile.Durability) error

// Option configures Open.
type Option func(*config)

type config struct {
	logger     klog.Logger
	bootIDPath string
	bootID     string
	now        func() time.Time
	maxCorrupt int
	maxSize    int64
	write      WriteFunc
	syncer     atomicfile.Syncer
}

// WithLogger sets the logger for what Open finds (corruption, migration, reboot, leftovers).
// The default is klog.Background().
func WithLogger(logger klog.Logger) Option { return func(c *config) { c.logger = logger } }

// WithBootIDPath reads the boot ID from path instead of DefaultBootIDPath.
func WithBootIDPath(path string) Option { return func(c *config) { c.bootIDPath = path } }

// WithBootID uses id as the current boot ID instead of reading one. id must not be empty.
func WithBootID(id string) Option { return func(c *config) { c.bootID = id } }

// WithClock sets the time source for UpdatedAt stamps and corrupt-file names.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithMaxCorrupt keeps at most n moved-aside corrupt checkpoints, deleting the oldest; n < 1
// keeps one, the one just moved.
func WithMaxCorrupt(n int) Option { return func(c *config) { c.maxCorrupt = n } }

// WithMaxSize replaces DefaultMaxSize as the largest checkpoint the store reads or writes.
func WithMaxSize(n int64) Option { return func(c *config) { c.maxSize = n } }

// WithWriteFunc replaces the atomic file writer.
func WithWriteFunc(w WriteFunc) Option { return func(c *config) { c.write = w } }

// WithSyncer makes the store's fsyncs go through s (default atomicfile.OSSyncer): tests count
// them or record what would survive a power loss.
func WithSyncer(s atomicfile.Syncer) Option { return func(c *config) { c.syncer = s } }

// LoadReport says what Open found, so the caller can decide how much to rebuild from hardware
// and CDI files.
type LoadReport struct {
	// Path is the checkpoint file.
	Path string
	// Fresh is true when there was no checkpoint file: a first start, or one after the state
	// directory was wiped.
	Fresh bool
	// Corrupt is true when a checkpoint existed but could not be used (unreadable, bad JSON,
	// truncated, checksum mismatch, invalid content). The store starts empty; the caller must
	// rebuild state from hardware and CDI files.
	Corrupt bool
	// MovedTo is where the unusable checkpoint was moved, byte for byte.
	MovedTo string
	// Reason is why the checkpoint was unusable; it wraps ErrCorrupt or the read error.
	Reason error
	// Migrated is the schema version the checkpoint was migrated from, 0 when none was needed.
	Migrated int
	// MigrationBackup is where the pre-migration file was kept, byte for byte.
	MigrationBackup string
	// Rebooted is true when the checkpoint was last written in a different boot.
	Rebooted bool
	// PreviousBootID is the boot ID recorded in the checkpoint, empty when unknown.
	PreviousBootID string
	// BootID is the current boot ID.
	BootID string
	// CleanedTemp are leftover temporary files of an interrupted write that Open removed.
	CleanedTemp []string
}

// Store is the checkpoint of one kubelet plugin. It is safe for concurrent use; updates are
// linearizable, group-committed, and each survives what its caller asks (atomicfile.Durability)
// before Update returns.
type Store struct {
	path    string
	bootID  string
	now     func() time.Time
	write   WriteFunc
	maxSize int64 // the largest checkpoint read or written
	files   *atomicfile.Files
	lock    *filelock.File

	mu    sync.RWMutex // guards state
	state State        // committed: equal to what is on disk; written only by the leader
	// loaded identifies the file state was read from or written to; when the file on disk
	// differs, another process changed it and the leader reloads before applying updates.
	loaded fileID
	// pinned is that file, held open so that its inode number cannot be reused (see fileID).
	// Leader only (and Open, Close).
	pinned *os.File
	// reloads counts the reloads, that is the changes by another process seen so far.
	reloads atomic.Uint64
	// durable is what the file on disk is known to survive: what its last write or sync by
	// this store paid for, ProcessCrash after a reload (another process wrote it). Leader only.
	durable atomicfile.Durability
	// enc caches the JSON encoding of committed claims by UID, so that an update re-encodes
	// only the claims it changed. Missing entries are encoded on demand. Leader only.
	enc map[string][]byte

	// Group commit: concurrent Updates queue up; one of them, the leader, applies the queue
	// and writes once for all of it.
	qmu     sync.Mutex
	queue   []*request
	leading bool // a leader is running or leadership is being handed to queue[0]
}

// request is one queued Update.
type request struct {
	// apply returns the state after this request from the state before it, and the UIDs of the
	// claims it added or changed (settled, not yet stamped). It must not change work: claims
	// are shared between successive states and never changed in place.
	apply func(work State) (next State, touched []string, err error)
	dur   atomicfile.Durability
	done  chan error // buffered: receives errLead at most once, then the result
}

// errLead tells a queued request that it is now the leader.
var errLead = errors.New("checkpoint: lead the next batch")

// Open opens or creates the checkpoint in dir (created with DirMode if missing). It removes
// leftover temporary files, migrates an older schema, and moves an unusable checkpoint aside
// (starting empty and saying so in the report) instead of failing. It fails only when the
// directory cannot be prepared, the boot ID cannot be read, the checkpoint was written by a newer
// schema, an unusable checkpoint cannot be moved aside, or a migrated one cannot be rewritten.
func Open(dir string, opts ...Option) (*Store, LoadReport, error) {
	cfg := config{
		logger:     klog.Background(),
		bootIDPath: DefaultBootIDPath,
		now:        time.Now,
		maxCorrupt: DefaultMaxCorrupt,
		maxSize:    DefaultMaxSize,
		syncer:     atomicfile.OSSyncer{},
	}
	for _, o := range opts {
		o(&cfg)
	}
	files := atomicfile.New(atomicfile.WithSyncer(cfg.syncer))
	if cfg.write == nil {
		cfg.write = files.Write
	}
	cfg.maxCorrupt = max(cfg.maxCorrupt, 1)
	logger := cfg.logger.WithName("checkpoint")
	path := filepath.Join(dir, FileName)
	report := LoadReport{Path: path}

	bootID, err := readBootID(cfg)
	if err != nil {
		return nil, report, err
	}
	report.BootID = bootID
	if err := prepareDir(dir, logger); err != nil {
		return nil, report, err
	}

	lock, err := filelock.Open(filepath.Join(dir, LockFileName))
	if err != nil {
		return nil, report, err
	}
	if err := lock.Lock(true); err != nil {
		_ = lock.Close()
		return nil, report, err
	}
	defer func() { _ = lock.Unlock() }()
	s := &Store{path: path, bootID: bootID, now: cfg.now, write: cfg.write, maxSize: cfg.maxSize, files: files, lock: lock,
		state: State{Claims: map[string]ClaimState{}}, durable: atomicfile.ProcessCrash}
	if err := s.load(cfg, &report, logger); err != nil {
		_ = lock.Close()
		return nil, report, err
	}
	s.loaded = s.pin()
	return s, report, nil
}

// load reads the checkpoint into s with the lock held: it removes temporaries of a crashed
// write, migrates an older schema, and moves an unusable file aside.
func (s *Store) load(cfg config, report *LoadReport, logger klog.Logger) error {
	dir, path := filepath.Dir(s.path), s.path
	// Under the lock no other process writes the checkpoint: its temporaries are leftovers of a
	// crash. Other files of the directory have their own writers and locks.
	if removed, err := atomicfile.Clean(dir, FileName); err != nil {
		logger.Error(err, "Removing leftover temporary files failed", "dir", dir)
	} else if len(removed) > 0 {
		report.CleanedTemp = removed
		logger.Info("Removed leftovers of an interrupted checkpoint write", "dir", dir, "files", removed)
	}
	b, err := s.read()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Write the empty state at once, durably (once per state directory): a later start that
		// finds no file knows it was wiped, never that a power loss lost it.
		report.Fresh = true
		logger.V(1).Info("No checkpoint, starting empty", "path", path, "bootID", s.bootID)
		if err := s.writeState(s.state, nil, atomicfile.PowerLoss); err != nil {
			return err
		}
		s.durable = atomicfile.PowerLoss
		return nil
	case isTooLarge(err):
		// Not what this store writes, and maybe a whole state: never discard it unread.
		logger.Error(err, "Checkpoint over the size limit; refusing to start", "path", path, "limit", s.maxSize)
		return fmt.Errorf("%w: a checkpoint this driver writes never grows so large; inspect the file and move it aside by hand to start empty", err)
	case err != nil:
		err = fmt.Errorf("read checkpoint %s: %w", path, err)
	default:
		var d decoded
		d, err = decode(path, b)
		if uv := (*UnsupportedVersionError)(nil); errors.As(err, &uv) {
			logger.Error(err, "Checkpoint written by a newer driver; refusing to start", "path", path, "version", uv.Version)
			return err
		}
		if err == nil {
			return s.useDecoded(b, d, report, logger)
		}
	}
	// Unusable: keep it for a human, start empty.
	report.Corrupt = true
	report.Reason = err
	moved, merr := moveAside(s.files, path, cfg.now(), cfg.maxCorrupt, logger)
	if merr != nil {
		return fmt.Errorf("checkpoint %s is unusable (%v) and could not be moved aside: %w", path, err, merr)
	}
	report.MovedTo = moved
	logger.Error(err, "Checkpoint unusable; moved aside, starting with empty state, caller must rebuild from hardware and CDI files",
		"path", path, "movedTo", moved, "bootID", s.bootID)
	return nil
}

// useDecoded takes a decoded checkpoint as the store's state, migrating an older schema.
func (s *Store) useDecoded(b []byte, d decoded, report *LoadReport, logger klog.Logger) error {
	s.state = d.state
	report.PreviousBootID = d.bootID
	report.Rebooted = d.bootID != "" && d.bootID != s.bootID
	if report.Rebooted {
		logger.Info("Node rebooted since the checkpoint was written", "path", s.path,
			"previousBootID", d.bootID, "bootID", s.bootID, "claims", len(d.state.Claims))
	}
	if d.version != CurrentVersion {
		if err := s.migrate(b, d.version, report, logger); err != nil {
			return err
		}
	}
	return fixFileMode(s.path, logger)
}

func readBootID(cfg config) (string, error) {
	if cfg.bootID != "" {
		return cfg.bootID, nil
	}
	b, err := os.ReadFile(cfg.bootIDPath)
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("read boot ID: %s is empty", cfg.bootIDPath)
	}
	return id, nil
}

func prepareDir(dir string, logger klog.Logger) error {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("create checkpoint directory %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("stat checkpoint directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("checkpoint directory %s: not a directory", dir)
	}
	if st.Mode().Perm() != DirMode {
		if err := os.Chmod(dir, DirMode); err != nil {
			return fmt.Errorf("chmod checkpoint directory %s to %v: %w", dir, DirMode, err)
		}
		logger.V(1).Info("Tightened checkpoint directory mode", "dir", dir, "from", st.Mode().Perm(), "to", DirMode)
	}
	return nil
}

func fixFileMode(path string, logger klog.Logger) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat checkpoint %s: %w", path, err)
	}
	if st.Mode().Perm() != FileMode {
		if err := os.Chmod(path, FileMode); err != nil {
			return fmt.Errorf("chmod checkpoint %s to %v: %w", path, FileMode, err)
		}
		logger.V(1).Info("Tightened checkpoint file mode", "path", path, "from", st.Mode().Perm(), "to", FileMode)
	}
	return nil
}

// migrate keeps the old file next to the checkpoint and rewrites the checkpoint in the current
// schema. Both writes survive a power loss (once per upgrade): the backup is the only copy of
// the old file a human may need.
func (s *Store) migrate(old []byte, from int, report *LoadReport, logger klog.Logger) error {
	backup := fmt.Sprintf("%s.v%d", s.path, from)
	if err := s.write(backup, old, FileMode, atomicfile.PowerLoss); err != nil {
		return fmt.Errorf("keep version %d checkpoint as %s before migrating: %w", from, backup, err)
	}
	b, err := encode(s.state, s.bootID)
	if err != nil {
		return err
	}
	if err := s.write(s.path, b, FileMode, atomicfile.PowerLoss); err != nil {
		return fmt.Errorf("write checkpoint %s migrated from version %d: %w", s.path, from, err)
	}
	s.durable = atomicfile.PowerLoss
	report.Migrated = from
	report.MigrationBackup = backup
	logger.Info("Migrated checkpoint", "path", s.path, "from", from, "to", CurrentVersion, "backup", backup,
		"claims", len(s.state.Claims))
	return nil
}

// moveAside renames an unusable checkpoint (file or whatever is in its place) to
// <path>.corrupt-<UTC time>[-N] and prunes the oldest copies beyond keep. Names order copies
// oldest first; a copy made within the same clock tick as an existing one gets the next N. The
// rename is synced (start-up only): the copy is evidence for a human.
func moveAside(files *atomicfile.Files, path string, now time.Time, keep int, logger klog.Logger) (string, error) {
	dir, prefix := filepath.Dir(path), filepath.Base(path)+corruptInfix
	listCopies := func() ([]string, error) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("list corrupt checkpoint copies in %s: %w", dir, err)
		}
		var names []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				names = append(names, e.Name())
			}
		}
		slices.SortFunc(names, compareCorruptNames)
		return names, nil
	}
	existing, err := listCopies()
	if err != nil {
		return "", err
	}
	stamp := now.UTC().Format(corruptTimeFormat)
	name, next := prefix+stamp, -1
	for _, e := range existing {
		if ts, n := splitCorruptName(e); ts == stamp {
			next = max(next, n+1)
		}
	}
	if next >= 0 {
		name = fmt.Sprintf("%s-%d", name, max(next, 1))
	}
	dst := filepath.Join(dir, name)
	if err := os.Rename(path, dst); err != nil {
		return "", fmt.Errorf("rename %s to %s: %w", path, dst, err)
	}
	if err := files.SyncDir(dir); err != nil {
		return dst, err
	}
	all, err := listCopies()
	if err != nil {
		logger.Error(err, "Pruning old corrupt checkpoint copies failed")
		return dst, nil
	}
	for _, old := range all[:max(len(all)-keep, 0)] {
		p := filepath.Join(dir, old)
		if err := os.RemoveAll(p); err != nil {
			logger.Error(err, "Removing old corrupt checkpoint copy failed", "path", p)
			continue
		}
		logger.V(1).Info("Removed old corrupt checkpoint copy", "path", p, "keep", keep)
	}
	return dst, nil
}

// compareCorruptNames orders corrupt-copy names oldest first: by timestamp, then by the numeric
// suffix added on a name clash.
func compareCorruptNames(a, b string) int {
	ta, na := splitCorruptName(a)
	tb, nb := splitCorruptName(b)
	if c := strings.Compare(ta, tb); c != 0 {
		return c
	}
	return na - nb
}

// splitCorruptName returns the timestamp and clash suffix (0 when none) of a corrupt-copy name.
func splitCorruptName(name string) (string, int) {
	rest := name[strings.Index(name, corruptInfix)+len(corruptInfix):]
	if len(rest) <= len(corruptTimeFormat) {
		return rest, 0
	}
	n, err := strconv.Atoi(strings.TrimPrefix(rest[len(corruptTimeFormat):], "-"))
	if err != nil || n < 0 {
		return rest, 0
	}
	return rest[:len(corruptTimeFormat)], n
}

// Path returns the checkpoint file.
func (s *Store) Path() string { return s.path }

// BootID returns the current boot ID, the one stamped on claims changed by this Store.
func (s *Store) BootID() string { return s.bootID }

// Get returns a copy of the claim with the given UID.
func (s *Store) Get(uid string) (ClaimState, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.state.Claims[uid]
	if !ok {
		return ClaimState{}, false
	}
	return c.Clone(), true
}

// List returns copies of all claims, ordered by UID.
func (s *Store) List() []ClaimState {
	return s.ListFunc(func(*ClaimState) bool { return true })
}

// ListFunc returns copies of the claims for which keep reports true, ordered by UID; only those
// are copied and sorted (a prepare asks for the few interrupted ones among all). keep sees each
// stored claim and must neither change nor retain it.
func (s *Store) ListFunc(keep func(*ClaimState) bool) []ClaimState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []ClaimState
	for _, c := range s.state.Claims {
		if keep(&c) {
			out = append(out, c.Clone())
		}
	}
	slices.SortFunc(out, func(a, b ClaimState) int { return strings.Compare(a.UID, b.UID) })
	return out
}

// Update runs fn on a copy of the state and, if fn succeeds and the result is valid, writes it
// and makes it the store's state before returning. Once Update returns, the checkpoint as it
// is then survives what d says: a crash of the process always; a power loss with
// PowerLossChecked (the file's name, whose content a power loss may tear: Open detects that by
// the checksum) or PowerLoss (intact content). Claims that fn added or changed get BootID and
// UpdatedAt stamped. If fn, validation or the write fails, this update changes nothing, in
// memory or on disk, and the error is returned; a panic in fn is returned as an error. When fn
// changes nothing, nothing is written, but the checkpoint is still synced when d asks for more
// than it had.
//
// Updates are linearizable: each fn sees the result of every update that returned before it
// started. Concurrent updates are group-committed: while one write is in flight the next ones
// queue, then are applied in arrival order on top of each other and written once, with the
// strongest durability any of them asks for: one fsync for all of them. If that write fails,
// every update of the batch fails. fn must not call Update, Put or Delete.
func (s *Store) Update(d atomicfile.Durability, fn func(*State) error) error {
	return s.enqueue(d, func(work State) (State, []string, error) {
		next := work.Clone()
		if err := callUpdate(fn, &next); err != nil {
			return State{}, nil, err
		}
		if next.Claims == nil {
			next.Claims = map[string]ClaimState{}
		}
		touched, err := s.settle(work, next, slices.Sorted(maps.Keys(next.Claims)))
		return next, touched, err
	})
}

// enqueue queues apply for the next batch and returns its outcome once the batch is written
// (see Update). Put, Delete and Sync build their next state without Update's deep copy.
func (s *Store) enqueue(d atomicfile.Durability, apply func(State) (State, []string, error)) error {
	r := &request{apply: apply, dur: d, done: make(chan error, 1)}
	s.qmu.Lock()
	s.queue = append(s.queue, r)
	lead := !s.leading
	s.leading = true
	s.qmu.Unlock()
	if !lead {
		if err := <-r.done; !errors.Is(err, errLead) {
			return err
		}
	}
	s.qmu.Lock()
	batch := s.queue
	s.queue = nil
	s.qmu.Unlock()

	s.commit(batch)

	s.qmu.Lock()
	if len(s.queue) > 0 {
		s.queue[0].done <- errLead
	} else {
		s.leading = false
	}
	s.qmu.Unlock()
	return <-r.done
}

// commit applies a batch of updates in order and writes the result once, holding the lock file
// so that no other process writes in between; updates apply on top of what is on disk. Only the
// leader calls it.
func (s *Store) commit(batch []*request) {
	results := make([]error, len(batch))
	if err := s.lock.Lock(true); err != nil {
		s.fail(batch, err)
		return
	}
	defer func() { _ = s.lock.Unlock() }()
	if err := s.reload(); err != nil {
		s.fail(batch, err)
		return
	}
	work := s.state            // only the leader replaces s.state, so reading it unlocked is safe
	dirty := map[string]bool{} // claims whose cached encoding is stale
	changed := false
	need := atomicfile.ProcessCrash // the strongest durability a successful update asks for
	var now time.Time
	for i, r := range batch {
		if err := r.dur.Check(); err != nil {
			results[i] = fmt.Errorf("update checkpoint %s: %w", s.path, err)
			continue
		}
		next, touched, err := r.apply(work)
		if err != nil {
			results[i] = err
			continue
		}
		if len(touched) > 0 || len(next.Claims) != len(work.Claims) {
			changed = true
		}
		need = max(need, r.dur)
		for _, uid := range touched {
			if now.IsZero() {
				now = s.now().UTC().Round(0)
			}
			c := next.Claims[uid]
			c.BootID, c.UpdatedAt = s.bootID, now
			next.Claims[uid] = c
			dirty[uid] = true
		}
		work = next
	}
	var err error
	switch {
	case changed:
		err = s.writeBatch(work, dirty, need)
	case need > s.durable && statID(s.path).exists:
		// Nothing to write, but what is on disk must survive more than it was written for.
		if err = s.files.Sync(s.path, need); err != nil {
			err = fmt.Errorf("update checkpoint %s: %w", s.path, err)
		} else {
			s.durable = need
		}
	}
	for i, r := range batch {
		if results[i] == nil {
			results[i] = err
		}
		r.done <- results[i]
	}
}

// writeBatch writes the state a batch produced, reusing the cached encodings of the claims it
// did not touch, and makes it the store's state.
func (s *Store) writeBatch(work State, dirty map[string]bool, need atomicfile.Durability) error {
	enc := make(map[string][]byte, len(work.Claims))
	for uid := range work.Claims {
		if b, ok := s.enc[uid]; ok && !dirty[uid] {
			enc[uid] = b
		}
	}
	err := s.writeState(work, enc, need)
	nd := (*atomicfile.NotDurableError)(nil)
	if err == nil || errors.As(err, &nd) {
		// The file holds the new state (even when its rename may not be durable): so must
		// memory, or the store and the disk would disagree.
		id := s.pin()
		s.mu.Lock()
		s.state, s.enc, s.loaded = work, enc, id
		s.mu.Unlock()
		s.durable = need
		if err != nil {
			s.durable = atomicfile.ProcessCrash
		}
	}
	return err
}

// settle validates and normalizes those of the claims uids (keys of next) that differ from work's,
// in place in next, and returns their UIDs. Claims an update left alone are equal to work's,
// which were settled when they were written: checking only the changed ones keeps a commit's
// cost from growing with every claim the node holds.
func (s *Store) settle(work, next State, uids []string) ([]string, error) {
	var touched []string
	for _, uid := range uids {
		c := next.Claims[uid]
		old, had := work.Claims[uid]
		if had && reflect.DeepEqual(old, c) {
			continue
		}
		if err := validateClaim(uid, c); err != nil {
			return nil, fmt.Errorf("update checkpoint %s: %w", s.path, err)
		}
		c = normalizeClaim(c)
		if had && reflect.DeepEqual(old, c) {
			continue
		}
		next.Claims[uid] = c
		touched = append(touched, uid)
	}
	return touched, nil
}

func (s *Store) fail(batch []*request, err error) {
	for _, r := range batch {
		r.done <- fmt.Errorf("update checkpoint %s: %w", s.path, err)
	}
}

// reload reads the checkpoint again when another process changed it since this store last read
// or wrote it. The lock must be held. A file that cannot be used is an error: it is left alone
// (Open, not a running store, moves unusable files aside).
func (s *Store) reload() error {
	id := statID(s.path)
	if id == s.loaded {
		return nil
	}
	st := State{Claims: map[string]ClaimState{}}
	b, err := s.read()
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("re-read checkpoint changed by another process: %w", err)
	default:
		d, err := decode(s.path, b)
		if err != nil {
			return fmt.Errorf("re-read checkpoint changed by another process: %w", err)
		}
		if d.version != CurrentVersion {
			return fmt.Errorf("re-read checkpoint changed by another process: schema version %d, this binary writes %d", d.version, CurrentVersion)
		}
		st = d.state
	}
	id = s.pin() // the same file: the lock is held
	s.mu.Lock()
	s.state, s.enc, s.loaded = st, nil, id
	s.mu.Unlock()
	s.durable = atomicfile.ProcessCrash // another process wrote it: no telling what it paid for
	s.reloads.Add(1)
	return nil
}

// Reloads counts how often the store found the checkpoint changed by another process and read
// it again: a caller that caches something derived from the state refreshes it when the count
// moved.
func (s *Store) Reloads() uint64 { return s.reloads.Load() }

// Refresh makes the store's state what is on disk now, reading the checkpoint again if another
// process (a second plugin pod during a rolling update) changed it. Call it after taking the
// locks of an operation and before reading the state the operation depends on.
func (s *Store) Refresh() error { return s.Sync(atomicfile.ProcessCrash) }

// Sync makes the checkpoint as it is now survive what d says (see Update); it writes nothing.
// Concurrent calls, and updates queued with them, share one fsync.
func (s *Store) Sync(d atomicfile.Durability) error {
	return s.enqueue(d, func(work State) (State, []string, error) { return work, nil, nil })
}

// Close releases the store's lock file. The store must not be used afterwards.
func (s *Store) Close() error {
	s.unpin()
	return s.lock.Close()
}

// fileID identifies one version of the checkpoint file: every write renames a new file into
// place, whose inode differs from that of the file it replaces. Not necessarily from that of
// an older one: a file system may give a freed inode number to the next new file (ext4 does at
// once), and one of the same size written within one timestamp tick (kernels before 6.13 stamp
// ext4 and XFS files at the clock tick) would look unchanged. So the store keeps the file it
// loaded open (pin): its inode is not freed, and no other version can get its number.
type fileID struct {
	exists    bool
	dev, ino  uint64
	size      int64
	mtimeNsec int64
	ctimeNsec int64
}

func statID(path string) fileID {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}
	}
	return idOf(&st)
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{exists: true, dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtimeNsec: st.Mtim.Nano(), ctimeNsec: st.Ctim.Nano()}
}

// pin opens the checkpoint file as it is now, keeps it open in place of the file pinned before
// and returns its identity. The lock must be held. No file (or one that cannot be opened) pins
// nothing and returns the zero identity, which differs from every file's.
func (s *Store) pin() fileID {
	s.unpin()
	f, err := os.Open(s.path)
	if err != nil {
		return fileID{}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		_ = f.Close()
		return fileID{}
	}
	s.pinned = f
	return idOf(&st)
}

// read reads the checkpoint file, at most s.maxSize bytes of it (an *input.TooLargeError past
// that).
func (s *Store) read() ([]byte, error) {
	return input.ReadFile(context.Background(), s.path, s.maxSize)
}

// isTooLarge reports whether err says an input was over its size limit.
func isTooLarge(err error) bool {
	var tl *input.TooLargeError
	return errors.As(err, &tl)
}

func (s *Store) unpin() {
	if s.pinned != nil {
		_ = s.pinned.Close()
		s.pinned = nil
	}
}

// writeState writes st, reusing and completing enc, the per-claim encodings.
func (s *Store) writeState(st State, enc map[string][]byte, d atomicfile.Durability) error {
	b, err := encodeCached(st, enc, s.bootID)
	if err != nil {
		return fmt.Errorf("update checkpoint %s: %w", s.path, err)
	}
	if int64(len(b)) > s.maxSize {
		return fmt.Errorf("update checkpoint %s: %d claims take %d bytes, over the %s limit a restart reads back", s.path, len(st.Claims), len(b), input.FormatSize(s.maxSize))
	}
	if err := s.write(s.path, b, FileMode, d); err != nil {
		return fmt.Errorf("update checkpoint %s: %w", s.path, err)
	}
	return nil
}

// callUpdate runs fn, turning a panic into an error so that one bad caller cannot wedge the
// queue of the others.
func callUpdate(fn func(*State) error, st *State) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("checkpoint update function panicked: %v", p)
		}
	}()
	return fn(st)
}

// Put records c under c.UID, replacing any previous state of that claim; d as for Update.
func (s *Store) Put(c ClaimState, d atomicfile.Durability) error {
	c = c.Clone()
	return s.enqueue(d, func(work State) (State, []string, error) {
		next := work.shallowClone()
		next.Claims[c.UID] = c
		touched, err := s.settle(work, next, []string{c.UID})
		return next, touched, err
	})
}

// Delete forgets the claim with the given UID; d as for Update. Deleting an unknown claim is
// not an error (and still syncs as d asks).
func (s *Store) Delete(uid string, d atomicfile.Durability) error {
	return s.enqueue(d, func(work State) (State, []string, error) {
		if _, ok := work.Claims[uid]; !ok {
			return work, nil, nil
		}
		next := work.shallowClone()
		delete(next.Claims, uid)
		return next, nil, nil
	})
}
