package imex

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// Daemon defaults.
const (
	// DefaultDomainPoll is how often the Daemon reads its domain.
	DefaultDomainPoll = 2 * time.Second
	// DefaultWithdrawTimeout bounds the removal of the node's entry when the daemon stops.
	DefaultWithdrawTimeout = 10 * time.Second
)

// FieldManager returns the server-side apply field manager of node's daemon: the owner of the
// node's entry in a domain's status.
func FieldManager(node string) string { return "imex-daemon/" + node }

// Daemon is the IMEX daemon of one node in one domain. It writes nvidia-imex's config, keeps
// the nodes file equal to the addresses of the domain's nodes in its clique (status.nodes,
// sorted by node name, this node always among them), restarts nvidia-imex when that list
// changes, and reports its node in the domain's status: NotReady until nvidia-imex-ctl says
// ready with the domain's complete node list (spec.numNodes nodes of its clique), Ready while
// it does, NotReady again when nvidia-imex dies. When it stops it removes
// its node's entry.
type Daemon struct {
	cfg      Config
	domains  Domains
	writer   *Writer
	sup      *Supervisor
	poll     time.Duration
	withdraw time.Duration
	imex     IMEXConfig
}

// DaemonOption configures NewDaemon.
type DaemonOption func(*daemonOptions)

type daemonOptions struct {
	poll, withdraw time.Duration
	imex           IMEXConfig
	supervisor     []SupervisorOption
}

// WithDomainPoll sets how often the domain is read (DefaultDomainPoll).
func WithDomainPoll(d time.Duration) DaemonOption { return func(o *daemonOptions) { o.poll = d } }

// WithWithdrawTimeout bounds the removal of the node's entry on stop (DefaultWithdrawTimeout).
func WithWithdrawTimeout(d time.Duration) DaemonOption {
	return func(o *daemonOptions) { o.withdraw = d }
}

// WithPorts sets nvidia-imex's peer and command ports (0: the defaults).
func WithPorts(server, command int) DaemonOption {
	return func(o *daemonOptions) { o.imex.ServerPort, o.imex.CommandPort = server, command }
}

// WithSupervisorOptions passes options to the daemon's Supervisor (its driver root is the
// Config's).
func WithSupervisorOptions(opts ...SupervisorOption) DaemonOption {
	return func(o *daemonOptions) { o.supervisor = append(o.supervisor, opts...) }
}

// NewDaemon returns the daemon cfg describes, reading and writing its domain through domains.
func NewDaemon(cfg Config, domains Domains, opts ...DaemonOption) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if domains == nil {
		return nil, errors.New("IMEX daemon: no Domains client")
	}
	o := daemonOptions{poll: DefaultDomainPoll, withdraw: DefaultWithdrawTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	o.imex.Dir, o.imex.BindIP = cfg.Dir, cfg.PodIP
	if err := o.imex.Validate(); err != nil {
		return nil, fmt.Errorf("IMEX daemon: nvidia-imex config: %w", err)
	}
	root := cfg.DriverRoot
	if root == "" {
		root = "/"
	}
	supOpts := append([]SupervisorOption{WithDriverRoot(root)}, o.supervisor...)
	return &Daemon{
		cfg: cfg, domains: domains, writer: NewWriter(), poll: o.poll, withdraw: o.withdraw, imex: o.imex,
		sup: NewSupervisor(o.imex.ConfigPath(), supOpts...),
	}, nil
}

// Supervisor returns the daemon's Supervisor (to watch its State).
func (d *Daemon) Supervisor() *Supervisor { return d.sup }

// key is the domain's name.
func (d *Daemon) key() types.NamespacedName {
	return types.NamespacedName{Namespace: d.cfg.DomainNamespace, Name: d.cfg.DomainName}
}

// Run runs the daemon until ctx ends, then stops nvidia-imex and removes the node's entry
// from the domain's status. It returns an error when it cannot start (its directory or config
// file) or cannot withdraw the entry.
func (d *Daemon) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", d.cfg.NodeName, "computeDomain", d.key(), "uid", d.cfg.DomainUID)
	ctx = klog.NewContext(ctx, logger)
	if st, err := os.Stat(d.cfg.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("IMEX daemon directory %s (prepared by the node plugin with the daemon claim): %w", d.cfg.Dir, errors.Join(err, notDir(st)))
	}
	if err := d.writer.WriteConfig(d.imex); err != nil {
		return err
	}
	// The first start needs a nodes file: this node alone until the domain is read.
	if _, err := d.writer.WriteNodes(d.imex, []netip.Addr{d.cfg.PodIP}); err != nil {
		return err
	}
	l := loop{d: d, reported: ""}
	l.report(ctx) // NotReady, so that peers list this node
	l.refresh(ctx)
	supDone := make(chan struct{})
	go func() {
		defer close(supDone)
		_ = d.sup.Run(ctx)
	}()
	l.run(ctx)
	<-supDone
	return d.withdrawNode(ctx)
}

// notDir explains a directory path that names something else.
func notDir(st os.FileInfo) error {
	if st != nil && !st.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}

// withdrawNode removes the node's entry, with a fresh deadline: ctx has ended.
func (d *Daemon) withdrawNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.withdraw)
	defer cancel()
	if err := d.domains.RemoveNode(ctx, d.key(), d.cfg.DomainUID, FieldManager(d.cfg.NodeName), d.cfg.NodeName); err != nil {
		return fmt.Errorf("IMEX daemon stopping: %w", err)
	}
	klog.FromContext(ctx).Info("node withdrawn from the domain's status")
	return nil
}

// loop is the Daemon's main loop: it follows the domain and the supervisor.
type loop struct {
	d *Daemon
	// reported is the status last applied ("" before the first success).
	reported string
	// complete is set once the nodes file lists as many nodes as the domain's numNodes (any
	// number when it is 0): only then does a ready nvidia-imex make the node Ready.
	complete bool
	// minStarts is the supervisor's start count of the nvidia-imex that reads the current
	// nodes file: a process started before the file last changed does not make the node Ready,
	// even while it still answers ready before its restart.
	minStarts int
}

// run reads the domain every poll and reports the supervisor's changes until ctx ends.
func (l *loop) run(ctx context.Context) {
	tick := time.NewTicker(l.d.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.d.sup.Changed():
			l.report(ctx)
		case <-tick.C:
			l.refresh(ctx)
			l.report(ctx) // retries a failed apply
		}
	}
}

// status is the node's status now: Ready while nvidia-imex is ready with the domain's complete
// node list. A node list that still lacks nodes of the domain keeps the node NotReady even when
// nvidia-imex is ready with it: the next node to join changes the list, which restarts
// nvidia-imex, and a domain that turned Ready in between would hand out channels whose daemon
// is about to go (a restart under running workloads).
func (l *loop) status() string {
	if st := l.d.sup.State(); l.complete && st.Ready && st.Starts >= l.minStarts {
		return v1beta1.StatusReady
	}
	return v1beta1.StatusNotReady
}

// report applies the node's entry when its status differs from the last one applied.
func (l *loop) report(ctx context.Context) {
	status := l.status()
	if status == l.reported {
		return
	}
	d := l.d
	node := v1beta1.ComputeDomainNode{Name: d.cfg.NodeName, IPAddress: d.cfg.PodIP.String(), CliqueID: d.cfg.CliqueID, Status: status}
	if err := d.domains.ApplyNode(ctx, d.key(), d.cfg.DomainUID, FieldManager(d.cfg.NodeName), node); err != nil {
		klog.FromContext(ctx).Error(err, "cannot report the node; retrying")
		return
	}
	klog.FromContext(ctx).Info("node reported", "status", status)
	l.reported = status
}

// refresh reads the domain and, when its clique's node list changed, rewrites the nodes file
// and restarts nvidia-imex.
func (l *loop) refresh(ctx context.Context) {
	d := l.d
	logger := klog.FromContext(ctx)
	cd, err := d.domains.Get(ctx, d.key())
	if err != nil {
		logger.Error(err, "cannot read the domain; keeping the node list")
		return
	}
	if cd.UID != d.cfg.DomainUID {
		logger.Error(nil, "the domain of this name is another one; keeping the node list", "foundUID", cd.UID)
		return
	}
	if l.reported != "" && !l.holdsEntry(cd) {
		logger.Info("the domain's status lost this node's entry; applying it again")
		l.reported = ""
	}
	peers := Peers(cd, d.cfg.NodeName, d.cfg.PodIP, d.cfg.CliqueID)
	changed, err := d.writer.WriteNodes(d.imex, peers)
	if err != nil {
		logger.Error(err, "cannot write the nodes file")
		return
	}
	l.complete = len(peers) >= cd.Spec.NumNodes
	if changed {
		logger.Info("node list changed; restarting nvidia-imex", "peers", peers)
		l.minStarts = d.sup.State().Starts + 1
		d.sup.Restart()
	}
}

// holdsEntry reports whether cd's status has this node's entry as last applied (someone
// else's update of the status may have dropped or changed it).
func (l *loop) holdsEntry(cd *v1beta1.ComputeDomain) bool {
	c := l.d.cfg
	for _, n := range cd.Status.Nodes {
		if n.Name == c.NodeName {
			return n.IPAddress == c.PodIP.String() && n.CliqueID == c.CliqueID && n.Status == l.reported
		}
	}
	return false
}

// Peers returns the addresses for the nodes file of node (address self, clique clique): the
// ipAddress of each entry of cd.Status.Nodes in the clique, sorted by node name, with node's
// own entry set to self (added when the status lacks it). Entries with an address that does
// not parse, or one that an earlier entry has, are left out.
func Peers(cd *v1beta1.ComputeDomain, node string, self netip.Addr, clique string) []netip.Addr {
	type peer struct {
		name string
		addr netip.Addr
	}
	all := []peer{{node, self}}
	for _, n := range cd.Status.Nodes {
		if n.Name == node || n.CliqueID != clique {
			continue
		}
		a, err := netip.ParseAddr(n.IPAddress)
		if err != nil {
			continue
		}
		all = append(all, peer{n.Name, a})
	}
	slices.SortFunc(all, func(a, b peer) int { return strings.Compare(a.name, b.name) })
	var out []netip.Addr
	for _, p := range all {
		if !slices.Contains(out, p.addr) {
			out = append(out, p.addr)
		}
	}
	return out
}
