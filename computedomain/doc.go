// Package computedomain holds what the parts of a ComputeDomain (IMEX) driver share: the names
// of NVIDIA's compute-domain driver that manifests rely on, and this project's additions.
//
// A ComputeDomain (package computedomain/v1beta1) asks for a multi-node NVLink domain for one
// distributed job: every pod of the job gets an IMEX channel, and every node of the job runs an
// IMEX daemon that knows the job's other nodes, so that GPUs on several nodes of one NVLink
// clique (a GB200 NVL72 rack) can import each other's memory. The parts:
//
//   - computedomain/controller (controller-runtime): for each ComputeDomain it chooses an NVLink
//     clique with room for the job, makes the channel ResourceClaimTemplate the job's pods name
//     (in the domain's namespace, selecting channels of that clique, with a
//     ComputeDomainChannelConfig naming the domain), and a DaemonSet of IMEX daemons with their
//     own daemon claim template (in the driver's namespace, on nodes labelled NodeLabel=<domain
//     UID>), and keeps that label on exactly the nodes whose channel the scheduler allocated to
//     a claim of the domain, so a node's daemon starts as soon as a pod of the job is placed
//     there; it keeps the domain's status (clique, nodes, Ready) and, on deletion, removes the
//     DaemonSet, the templates and the node labels before the domain goes (a finalizer).
//   - computedomain/nodeplugin (on draplugin/exclusive): each node publishes channel-0 and
//     daemon-0, with attributes type, id and cliqueID, when its GPUs' fabric info puts it in a
//     clique (and nothing otherwise). Preparing a channel waits until the node's IMEX daemon is
//     Ready in the domain's status (or fails with the reason, and kubelet retries), creates the
//     channel device nodes and gives the container them and NVIDIA_VISIBLE_DEVICES=void. Preparing the daemon device gives the daemon pod its
//     directory (DaemonConfigDir) and clique.
//   - computedomain/imex: the IMEX daemon of one node: it writes nvidia-imex's config and nodes
//     file from the domain's status (the addresses of the clique's ready-to-join nodes), runs and
//     supervises nvidia-imex (restart with backoff, restart on a changed node list), asks
//     nvidia-imex-ctl whether it is ready, and reports its node (address, clique, Ready) into the
//     domain's status with server-side apply; it withdraws its node when it stops.
//
// Failures: a daemon that dies is restarted and its node is NotReady meanwhile, and so is the
// domain when it needs the node; a node that leaves (daemon pod or Node gone) is dropped from the
// status; a channel prepared before its node's daemon is ready waits instead of starting a
// container without a working channel; fabric info that puts a node in no clique (or not yet)
// keeps the node out.
package computedomain
