// Package imex is the IMEX daemon of one node in one ComputeDomain: the process that the
// domain's DaemonSet runs on each of its nodes. It writes nvidia-imex's config and node list,
// runs nvidia-imex and keeps it running, and reports the node in the domain's status, so that
// the node plugin can hand out IMEX channels once the node's daemon is ready.
//
// The daemon is configured from its container's environment (ConfigFromEnv: NODE_NAME, POD_IP,
// COMPUTE_DOMAIN_UUID, COMPUTE_DOMAIN_NAME, COMPUTE_DOMAIN_NAMESPACE, COMPUTE_DOMAIN_CLIQUE)
// and runs until its context ends:
//
//	cfg, err := imex.ConfigFromEnv(os.Getenv)
//	if err != nil {
//		return err
//	}
//	c, err := client.New(restConfig, client.Options{Scheme: scheme}) // with v1beta1.AddToScheme
//	if err != nil {
//		return err
//	}
//	d, err := imex.NewDaemon(cfg, imex.ClientDomains{Client: c})
//	if err != nil {
//		return err
//	}
//	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
//	defer stop()
//	return d.Run(ctx) // stops nvidia-imex and withdraws the node before it returns
//
// # Files
//
// The daemon's directory (computedomain.DaemonConfigDir, prepared by the node plugin) holds
// ConfigFile, NodesFile and LogFile. IMEXConfig lists the config keys the daemon sets and why;
// the nodes file holds the addresses of the domain's nodes in this node's clique, one a line,
// sorted by node name (Peers). Writer replaces both atomically; they must survive a process
// crash, not a power loss, because every start rewrites them from the domain's status.
//
// # Supervisor
//
// Supervisor runs `nvidia-imex -c CONFIG` as its child, from a driver root and with that root's
// own dynamic loader when it is not "/" (package internal/driverroot, shared with package
// sharing). It restarts nvidia-imex with exponential backoff when it exits, at once when the
// node list changes (nvidia-imex reads it only when it starts), asks `nvidia-imex-ctl -q` whether
// it is ready (ReadyAnswer), and stops it with SIGTERM, then SIGKILL after a grace period.
//
// # Status
//
// The daemon owns its node's entry in the domain's status.nodes (name, ipAddress, cliqueID,
// status), written with server-side apply as FieldManager(node), forced: NotReady when it
// starts and whenever nvidia-imex is down or not ready, Ready while nvidia-imex-ctl says so;
// an entry that someone else's status update dropped or changed is applied again.
// The controller owns the entry's index and the domain's status and cliqueID. When the daemon
// stops it removes its entry, whoever owns the entry's other fields (Domains.RemoveNode).
//
// Package imextest has a fake nvidia-imex and nvidia-imex-ctl to run the daemon without
// NVIDIA's binaries, and a fake API client whose server-side apply merges status.nodes by name.
package imex
